-- Gnomon on a multi-region CockroachDB cluster (v24.1.5+ / v24.2.3+). GENERATED, do not edit:
--   python -m gnomon.common.storage.dialect --database gnomon --role gnomon --primary us-east1 --regions us-west1,europe-west1 > deploy/cockroachdb/multiregion.sql
-- Apply after `gnomon migrate` (see deploy/README.md), outside an explicit transaction.
-- Compile-checked only (tests/unit/test_cockroachdb_ddl.py): no CockroachDB binary is available to CI.

-- 1. Database regions and survival goal.
-- https://www.cockroachlabs.com/docs/stable/alter-database  https://www.cockroachlabs.com/docs/stable/multiregion-overview  https://www.cockroachlabs.com/docs/stable/multiregion-survival-goals
ALTER DATABASE gnomon SET PRIMARY REGION "us-east1";
ALTER DATABASE gnomon ADD REGION IF NOT EXISTS "us-west1";
ALTER DATABASE gnomon ADD REGION IF NOT EXISTS "europe-west1";
ALTER DATABASE gnomon SURVIVE REGION FAILURE;

-- 2. Table localities: REGIONAL BY ROW on the home region.
-- https://www.cockroachlabs.com/docs/stable/table-localities#regional-by-row-tables  https://www.cockroachlabs.com/docs/stable/alter-table#set-locality
-- https://www.cockroachlabs.com/docs/stable/computed-columns
-- Tables with a `region` column: `crdb_region` is a STORED computed column `region::crdb_internal_region`
-- (REGIONAL BY ROW AS needs a crdb_internal_region column; a row whose region is not a database region
-- is rejected). Tables without one get CockroachDB's hidden crdb_region (default: the gateway's region).
-- jobs: home region column `region`
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE jobs SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- attempts: home region column `region`
ALTER TABLE attempts ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE attempts SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- queue_claims: home region column `region`
ALTER TABLE queue_claims ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE queue_claims SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- shard_owners: home region column `region`
ALTER TABLE shard_owners ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE shard_owners SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- audit_log: no region column: gateway region
ALTER TABLE audit_log SET LOCALITY REGIONAL BY ROW;
-- dlq_replays: no region column: gateway region
ALTER TABLE dlq_replays SET LOCALITY REGIONAL BY ROW;
-- queue_state: home region column `region`
ALTER TABLE queue_state ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE queue_state SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- schedules: home region column `region`
ALTER TABLE schedules ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE schedules SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- schedule_occurrences: home region column `region`
ALTER TABLE schedule_occurrences ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE schedule_occurrences SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- catchup_budget: home region column `region`
ALTER TABLE catchup_budget ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE catchup_budget SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- queue_limits: home region column `region`
ALTER TABLE queue_limits ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE queue_limits SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- region_owners: home region column `region`
ALTER TABLE region_owners ADD COLUMN IF NOT EXISTS crdb_region crdb_internal_region AS (region::crdb_internal_region) STORED NOT NULL;
ALTER TABLE region_owners SET LOCALITY REGIONAL BY ROW AS crdb_region;
-- namespaces: read everywhere, written rarely: GLOBAL
ALTER TABLE namespaces SET LOCALITY GLOBAL;
-- principals: read everywhere, written rarely: GLOBAL
ALTER TABLE principals SET LOCALITY GLOBAL;
-- api_keys: read everywhere, written rarely: GLOBAL
ALTER TABLE api_keys SET LOCALITY GLOBAL;
-- grants: read everywhere, written rarely: GLOBAL
ALTER TABLE grants SET LOCALITY GLOBAL;

-- 3. Session defaults the FOR UPDATE SKIP LOCKED claim transactions need (role of the services).
-- https://www.cockroachlabs.com/docs/stable/alter-role  https://www.cockroachlabs.com/docs/stable/set-vars  https://www.cockroachlabs.com/docs/stable/session-variables
-- https://www.cockroachlabs.com/docs/stable/select-for-update: FOR UPDATE locks under SERIALIZABLE are best-effort by default (lost on a lease transfer or a range split/merge); durable locks are held to commit, so a claimed row stays claimed.
ALTER ROLE gnomon SET enable_durable_locking_for_serializable = true;
-- https://www.cockroachlabs.com/docs/stable/select-for-update: lock with the Lock operator after filtering, on the primary index (PostgreSQL-like FOR UPDATE); with SKIP LOCKED the LIMIT is applied after skipping (fixed in v24.1.5 / v24.2.3).
ALTER ROLE gnomon SET optimizer_use_lock_op_for_serializable = true;
