"""The arithmetic of ``bench.write_set`` on given WAL groups: what counts as a heap insert or an index
tuple, and how two windows (an enqueue and a drain) add up into per-job figures."""

from __future__ import annotations

from bench.write_set_figures import WalGroup, Window, figures, tally


def test_windows_add_up():
    a = Window([WalGroup("Heap", "INSERT", "t", False, 2, 100, 0, 2)], 150, {"q": 1}, 3, {"t": {"ins": 2}})
    b = Window(
        [
            WalGroup("Heap2", "MULTI_INSERT", "t", False, 1, 300, 8000, 40),
            WalGroup("Btree", "SPLIT_R", "t_v", True, 1, 700, 0, 1),
            WalGroup("Btree", "SPLIT_R", "t_v", False, 1, 700, 0, 1),  # an upper level: no new tuple
            WalGroup("Btree", "INSERT_POST", "t_v", False, 4, 300, 0, 4),
        ],
        9000,
        {"q": 2, "COMMIT": 1},
        1,
        {"t": {"ins": 40}},
        settle_xacts=0.5,
    )
    s = a + b
    t = tally(s.groups)
    assert (t["heap_inserts"], t["index_tuples"], t["wal_fpi_bytes"], t["wal_records"]) == (42, 5, 8000, 9)
    assert (s.wal_bytes, s.statements, s.xacts, s.tables) == (
        9150,
        {"q": 3, "COMMIT": 1},
        4,
        {"t": {"ins": 42}},
    )
    f = figures(s, 2)
    assert (f["wal_bytes"], f["wal_bytes_without_fpi"], f["statements_without_tx_control"]) == (
        4575,
        575,
        1.5,
    )
    assert f["transactions"] == round((4 - 0.5) / 2, 3)
