from ablate.backend.analysis.manifest import PackageChange, compare_versions, diff_manifests


def test_diff_classifies_and_sorts():
    old = {"torch": "2.5.1", "vllm": "0.6.4.post1", "deepspeed": "0.16.0", "Old-Pkg": "1.0", "cuda": "12.8"}
    new = {
        "vllm": "0.12.0",
        "torch": "2.5.1",
        "flashinfer-python": "0.5.3",
        "deepspeed": "0.15.4",
        "cuda": "12.8.0",
        "apex": "0.1",
    }
    d = diff_manifests(old, new)
    assert d.added == (PackageChange("apex", None, "0.1"), PackageChange("flashinfer-python", None, "0.5.3"))
    assert d.removed == (PackageChange("Old-Pkg", "1.0", None),)
    assert d.upgraded == (PackageChange("vllm", "0.6.4.post1", "0.12.0"),)
    assert d.downgraded == (PackageChange("deepspeed", "0.16.0", "0.15.4"),)
    assert d.unchanged == (PackageChange("cuda", "12.8", "12.8.0"), PackageChange("torch", "2.5.1", "2.5.1"))
    assert [c.name for c in d.changed] == ["apex", "deepspeed", "flashinfer-python", "Old-Pkg", "vllm"]


def test_pep440_beats_string_order():
    assert compare_versions("0.6.4", "0.12.0") == 1  # string compare would say downgrade
    assert compare_versions("2.6.0rc1", "2.6.0") == 1
    assert compare_versions("1.0", "1.0.0") == 0


def test_non_pep440_fallback():
    assert compare_versions("25.09-cu128", "25.12-cu128") == 1
    assert compare_versions("25.12-cu128", "25.12-cu126") == -1
    assert compare_versions("575.57.08", "580.65.06") == 1
    assert compare_versions("abc", "abc") == 0
    assert compare_versions("v1-x", "1.0") in (-1, 0, 1)  # mixed parts never raise


def test_names_matched_pep503_and_order_independent():
    d = diff_manifests({"Flash_Attn": "2.6.0"}, {"flash-attn": "2.7.0"})
    assert d.upgraded == (PackageChange("flash-attn", "2.6.0", "2.7.0"),)
    a = {"b": "1", "a": "2", "c": "3"}
    b = {"c": "4", "a": "1", "d": "0"}
    assert diff_manifests(a, b) == diff_manifests(dict(reversed(a.items())), dict(reversed(b.items())))


def test_empty():
    d = diff_manifests({}, {})
    assert d.added == d.removed == d.upgraded == d.downgraded == d.unchanged == ()


def test_real_ppu_release_manifests():
    # Versions as in examples/releases/training-xpu-pytorch-25.01.yaml and -26.01.yaml.
    old = {
        "PPU SDK": "1.4.1",
        "ACCL-P": "1.4.0-7",
        "EIC": "1.3.7.cuda12.ppu",
        "transformer_engine": "1.12",
        "vllm": "0.6.4.post1",
    }
    new = {"PPU SDK": "2.0.0", "transformer_engine": "2.8", "vllm": "0.12.0+ppu2.0.0.oe"}
    d = diff_manifests(old, new)
    assert [c.name for c in d.upgraded] == ["PPU SDK", "transformer_engine", "vllm"]
    assert [c.name for c in d.removed] == ["ACCL-P", "EIC"]
    assert d.added == d.downgraded == d.unchanged == ()
