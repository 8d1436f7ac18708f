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
