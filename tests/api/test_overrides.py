"""api/overrides.py: scenarios from keywords (build_scenario), and every mistake a one-line UserError."""

import json
from types import SimpleNamespace

import pytest

from attnprof import api
from attnprof.errors import UserError
from attnprof.profiler.runner.storage import read_records
from attnprof.scenarios.scenario import Scenario

TINY = dict(variants=["sdpa"], modes=["plain"], min_len=64, max_len=128, d_model=32, heads=2, layers=1,
            repeats=1, warmup=0)


def test_keywords_override_the_scenario_file_and_say_so():
    sc = api.build_scenario("ci", variants="sdpa,lsh[n_hashes=4]", modes="plain", max_len=512)
    assert sc.variants == ("sdpa", "lsh[n_hashes=4]") and sc.modes == ("plain",)
    assert (sc.min_len, sc.max_len, sc.d_model) == (256, 512, 64)  # the rest from ci.toml
    assert "[overridden: " in sc.description and "max_len=512" in sc.description


def test_head_dim_sets_d_model_and_excludes_it():
    assert api.build_scenario(heads=8, head_dim=32, variants=["sdpa"]).d_model == 256
    with pytest.raises(api.UsageProblem, match="not both"):
        api.build_scenario(head_dim=32, d_model=256)


@pytest.mark.parametrize("kwargs, message", [
    (dict(seq_lens=[0]), "positive"),
    (dict(repeats=0), "positive"),
    (dict(warmup=-1), "negative"),
    (dict(min_len=4096, max_len=256), "above"),
    (dict(variants=["nope"]), "unknown variant"),
    (dict(dtype="int7"), "unknown dtype"),
])
def test_every_mistake_is_a_user_error(kwargs, message):
    with pytest.raises(UserError, match=message):
        api.build_scenario(**kwargs)


def test_variants_nobody_named_that_cannot_take_grouped_kv_heads_are_left_out_and_said():
    """issue 24: a GQA model config with the default variants predicts every variant that can
    take it (LSH's shared QK cannot) and says which it left out; a named LSH is refused."""
    from attnprof.api.overrides import scenario_warnings

    sc = api.build_scenario(model_config="tinyllama-1.1b", seq_lens=[256])
    assert "lsh" not in sc.variants and "sdpa" in sc.variants and "sliding_window" in sc.variants
    said = scenario_warnings(sc)
    assert len(said) == 1 and said[0].startswith("note: left out: lsh (") and "shares one tensor" in said[0]
    named = api.build_scenario(model_config="tinyllama-1.1b", seq_lens=[256], variants="lsh,sdpa")
    assert named.variants == ("lsh", "sdpa") and scenario_warnings(named) == []
    with pytest.raises(UserError, match="shares one tensor for queries and keys"):
        api.predict(model_config="tinyllama-1.1b", seq_lens=[256], variants="lsh,sdpa", layers=1)
    ci = api.build_scenario("ci", kv_heads=1)  # a scenario file's own list is the scenario's, not the caller's
    assert "lsh" not in ci.variants and ci.variants and scenario_warnings(ci)[0].startswith("note: left out: lsh")
    assert scenario_warnings(api.build_scenario("ci")) == []  # nothing to leave out: nothing said
