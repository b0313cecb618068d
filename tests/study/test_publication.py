"""What a variant publishes (study.publication): one record, one writer, one reader."""

from cem_ablate.analysis.statistics import Observation, VariantStatistics, variant_stats
from cem_ablate.study.publication import PairingRecord, VariantPublication, publications
from cem_ablate.study.spec import StatisticsConfig
from cem_ablate.study.verdicts import design_of, design_record

OBS = [Observation(lr, s, 5 + (lr - 1e-3) ** 2 * 1e5 + 0.01 * s) for lr in (5e-4, 1e-3, 2e-3) for s in range(3)]


def _statistics():
    return VariantStatistics("test perplexity", variant_stats(OBS, n_resamples=200), {})


def test_stats_json_keeps_the_shape_every_stored_study_has():
    statistics = _statistics()
    design = design_record(design_of([0, 1, 2], StatisticsConfig(alpha=0.05)), "holm")
    published = VariantPublication(statistics, {"llama": PairingRecord(True, "same init")}, design)
    # the exact mapping the publisher wrote before the record existed
    assert published.to_stats() == statistics.to_dict() | {
        "pairing": {"llama": {"paired": True, "reason": "same init"}},
        "design": design,
    }
    assert list(published.to_stats()) == list(statistics.to_dict()) + ["pairing", "design"]
    assert VariantPublication.from_stats(published.to_stats()) == published


def test_a_store_from_before_pairing_and_design_were_recorded_reads():
    old = _statistics().to_dict()
    published = VariantPublication.from_stats(old)
    assert published.pairing == {} and not published.pairing_recorded and published.design is None
    assert published.statistics == _statistics()
    assert VariantPublication.from_stats(None) is None and VariantPublication.from_stats({}) is None


def test_a_report_parses_each_variant_once(monkeypatch, tmp_path):
    from cem_ablate.reporting import report
    from tests.reporting.test_report import study

    records = study()
    calls = []
    original = VariantPublication.from_stats.__func__
    monkeypatch.setattr(
        VariantPublication, "from_stats", classmethod(lambda cls, data: calls.append(1) or original(cls, data))
    )
    published = publications(records)
    rows = report.build_rows(records, published)
    comparisons = report.build_comparisons(records, published=published)
    report.scaling_inputs(records, published)
    report.series_for(records, published)
    report.write_report(records, "s", tmp_path, comparisons=comparisons, published=published)
    assert len(calls) == len(records) and len(rows) == len(records)
