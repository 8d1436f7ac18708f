"""Fewer garbage collections while predictions run (profiler/collector.py): inside the
block the young generation is YOUNG allocations long and what existed is frozen; cycles
are still freed; both settings are undone afterwards, an exception included."""

import gc
import weakref

import pytest

from attnprof.profiler.collector import YOUNG, collect_less_often, fewer_collections


@pytest.fixture(autouse=True)
def restore_gc():
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_inside_the_block_collections_are_rarer_and_old_objects_frozen_then_both_undone():
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG, 10, 10)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_an_exception_inside_the_block_undoes_it_too():
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a prediction failed")
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_cycles_made_inside_the_block_are_still_freed():
    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None


def test_a_longer_young_generation_is_kept_and_a_shorter_one_lengthened():
    gc.set_threshold(700, 10, 10)
    collect_less_often()
    assert gc.get_threshold() == (YOUNG, 10, 10)
    gc.set_threshold(10 * YOUNG, 5, 5)
    collect_less_often()
    assert gc.get_threshold() == (10 * YOUNG, 5, 5)
