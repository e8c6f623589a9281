import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ablate.backend.domain.metrics import (
    KNOWN_METRICS,
    describe_metric,
    direction_of,
    get_metric,
    infer_direction,
    is_better,
    oriented_ratio,
    parse_unit_direction,
    resolve_metric,
)

EXPECTED = {
    "throughput_tokens_per_s": ("tokens/s", "higher"),
    "throughput_tokens_per_s_per_device": ("tokens/s/device", "higher"),
    "throughput_samples_per_s": ("samples/s", "higher"),
    "step_time_s": ("s", "lower"),
    "tflops_per_device": ("TFLOPS", "higher"),
    "mfu": ("ratio", "higher"),
    "peak_memory_gib": ("GiB", "lower"),
    "peak_memory_reserved_gib": ("GiB", "lower"),
    "loss": ("1", "lower"),
    "elapsed_s": ("s", "lower"),
    "compile_time_s": ("s", "lower"),
}
LOWER = [n for n, (_, d) in EXPECTED.items() if d == "lower"]
HIGHER = [n for n, (_, d) in EXPECTED.items() if d == "higher"]
positive = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


def test_registry_is_exactly_the_canonical_set():
    assert set(KNOWN_METRICS) == set(EXPECTED)
    for name, (unit, direction) in EXPECTED.items():
        m = get_metric(name)
        assert m is not None and m.name == name
        assert (m.unit, m.direction) == (unit, direction)
        assert m.label
        assert m.non_negative
    assert get_metric("throughput_tokens_per_s").label == "Throughput"
    assert get_metric("mfu").max_value == 1.0
    assert get_metric("nope") is None


def test_axis_title_has_unit():
    assert get_metric("throughput_tokens_per_s").axis_title() == "Throughput (tokens/s)"
    assert get_metric("peak_memory_gib").axis_title() == "Peak memory (GiB)"
    assert get_metric("loss").axis_title() == "Loss"


def test_oriented_ratio_examples():
    assert oriented_ratio("throughput_tokens_per_s", 120.0, 100.0) == pytest.approx(1.2)
    assert oriented_ratio("step_time_s", 0.8, 1.0) == pytest.approx(1.25)
    assert oriented_ratio("peak_memory_gib", 40.0, 50.0) == pytest.approx(1.25)
    assert oriented_ratio("step_time_s", 0.0, 1.0) is None
    assert oriented_ratio("step_time_s", 1.0, float("nan")) is None


def test_is_better():
    assert is_better("throughput_tokens_per_s", 2, 1)
    assert not is_better("throughput_tokens_per_s", 1, 1)
    assert is_better("step_time_s", 1, 2)
    assert not is_better("peak_memory_gib", 2, 1)


@pytest.mark.parametrize(
    ("unit", "direction"),
    [
        ("s", "lower"),
        ("ms", "lower"),
        ("GiB", "lower"),
        ("MiB", "lower"),
        ("GB", "lower"),
        ("bytes", "lower"),
        ("tokens/s", "higher"),
        ("ratio", "higher"),
        ("TFLOPS", "higher"),
        (None, "higher"),
    ],
)
def test_custom_direction_from_unit(unit, direction):
    assert infer_direction(unit) == direction
    assert direction_of("my_custom_metric", unit=unit) == direction


def test_direction_of_default_and_registry_wins():
    assert direction_of("unknown") == "higher"
    assert direction_of("unknown", default="lower") == "lower"
    assert direction_of("step_time_s", unit="tokens/s") == "lower"


def test_resolve_metric_requires_unit_for_custom():
    with pytest.raises(ValueError, match="unit"):
        resolve_metric("my_metric")
    with pytest.raises(ValueError, match="unit"):
        resolve_metric("my_metric", "  ")
    with pytest.raises(ValueError, match="unit"):
        resolve_metric("step_time_s", "ms")
    m = resolve_metric("dataloader_wait_ms", "ms")
    assert (m.unit, m.direction) == ("ms", "lower")
    assert resolve_metric("step_time_s", "s") is get_metric("step_time_s")
    assert describe_metric("x").unit == ""  # lenient variant never raises


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(LOWER), base=positive, factor=st.floats(1.0001, 100))
def test_slower_or_bigger_is_never_an_improvement(name, base, factor):
    worse = base * factor
    assert oriented_ratio(name, worse, base) < 1
    assert not is_better(name, worse, base)


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(HIGHER), base=positive, factor=st.floats(1.0001, 100))
def test_more_is_better_for_higher_metrics(name, base, factor):
    assert oriented_ratio(name, base * factor, base) > 1
    assert is_better(name, base * factor, base)


@pytest.mark.parametrize(
    ("unit", "direction"),
    [
        # costs in the numerator: lower is better, whatever they are per
        ("ms/step", "lower"),
        ("s/it", "lower"),
        ("usec", "lower"),
        ("msec", "lower"),
        ("GiB/device", "lower"),
        ("J", "lower"),
        ("W", "lower"),
        ("kWh", "lower"),
        ("J/token", "lower"),
        ("USD/hour", "lower"),
        ("W/device", "lower"),
        # rates per time and amounts of work: higher is better
        ("tokens/s", "higher"),
        ("tokens/s/device", "higher"),
        ("samples per second", "higher"),
        ("it/s", "higher"),
        ("GB/s", "higher"),
        ("TFLOPS", "higher"),
        ("tokens/J", "higher"),
        # nothing to read: the submitter must say
        ("%", None),
        ("1", None),
        ("count", None),
        ("", None),
        (None, None),
    ],
)
def test_compound_units_settle_direction_or_say_they_cannot(unit, direction):
    assert parse_unit_direction(unit) == direction


def test_stated_direction_wins_for_custom_metrics_only():
    assert resolve_metric("gpu_util", "%", "higher").direction == "higher"
    assert describe_metric("gpu_util", "%", "lower").direction == "lower"
    assert direction_of("gpu_util", unit="%", better="lower") == "lower"
    with pytest.raises(ValueError, match="lower-is-better"):
        resolve_metric("step_time_s", "s", "higher")
    with pytest.raises(ValueError, match="state it with better"):
        resolve_metric("gpu_util", "%")


def test_a_misspelt_known_metric_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="did you mean 'peak_memory_gib'"):
        resolve_metric("peak_mem_gib", "GiB")
    assert resolve_metric("host_rss_gib", "GiB").direction == "lower"  # not a lookalike


@pytest.mark.parametrize(
    ("name", "unit"),
    [("incidents", "failures/day"), ("errors", "count"), ("oom_errors", "1/day"), ("node_crashes", "1")],
)
def test_counts_of_failures_are_lower_is_better_unless_stated(name: str, unit: str) -> None:
    assert resolve_metric(name, unit).direction == "lower"
    assert describe_metric(name, unit).direction == "lower" and direction_of(name, unit=unit) == "lower"
    assert resolve_metric(name, unit, "higher").direction == "higher"  # stated wins
