"""reporting/transfer_report.py: the note under the transfer table when a proxy's lr* is
poorly determined (the table itself is checked end to end in tests/study/test_transfer.py)."""

from cem_ablate.reporting.transfer_report import WIDE_PROXY_INTERVAL, wide_proxy_note


def test_a_wide_proxy_interval_gets_the_note_and_narrow_ones_do_not():
    assert wide_proxy_note([]) == []
    assert wide_proxy_note([1.46, 1.58, 1.87]) == []  # the three GPU families that transferred within 1%
    note = wide_proxy_note([1.46, 5.66])
    assert len(note) == 2 and note[0] == "" and "lr_search.proxy_seeds" in note[1]
    assert f"more than {WIDE_PROXY_INTERVAL:g}x" in note[1]
