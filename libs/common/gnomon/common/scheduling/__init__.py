"""Scheduling rules shared by the planner and the API: misfire classification, overlap policy, and
the materialization of occurrences into jobs and decision records (docs/schedules.md)."""
