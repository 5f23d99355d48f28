"""The materializer's deadline heap against a brute-force model (a dict of deadlines)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.materializer.schedule import Schedule

_keys = st.integers(min_value=0, max_value=12)
_times = st.integers(min_value=0, max_value=50).map(float)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _keys, st.one_of(st.none(), _times)),
        st.tuples(st.just("earliest"), _keys, _times),
        st.tuples(st.just("cancel"), _keys, st.none()),
        st.tuples(st.just("pop"), _times, st.integers(min_value=0, max_value=5)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_schedule_matches_a_dict_of_deadlines(ops: list[tuple[str, object, object]]) -> None:
    schedule: Schedule[int] = Schedule()
    model: dict[int, float] = {}
    order: dict[int, int] = {}  # when the model's deadline was last set: ties pop in that order
    for step, (op, a, b) in enumerate(ops):
        if op == "set":
            key, deadline = int(a), b  # type: ignore[call-overload]
            schedule.set(key, deadline)  # type: ignore[arg-type]
            if deadline is None:
                model.pop(key, None)
            elif model.get(key) != deadline:
                model[key], order[key] = float(deadline), step  # type: ignore[arg-type]
        elif op == "earliest":
            key, deadline = int(a), float(b)  # type: ignore[call-overload, arg-type]
            schedule.earliest(key, deadline)
            if key not in model or deadline < model[key]:
                model[key], order[key] = deadline, step
        elif op == "cancel":
            schedule.cancel(int(a))  # type: ignore[call-overload]
            model.pop(int(a), None)  # type: ignore[call-overload]
        else:
            now, limit = float(a), int(b)  # type: ignore[arg-type, call-overload]
            expected = sorted((k for k, d in model.items() if d <= now), key=lambda k: (model[k], order[k]))
            expected = expected[:limit]
            assert schedule.pop_due(now, limit) == expected
            for key in expected:
                del model[key]
        assert len(schedule) == len(model)
        assert {k: schedule.deadline(k) for k in range(13)} == {k: model.get(k) for k in range(13)}
        assert schedule.next_deadline() == (min(model.values()) if model else None)
        # stale entries never pile up beyond a bound of the live ones
        assert len(schedule._heap) <= 2 * len(model) + 64 + 1


def test_rescheduling_one_key_many_times_keeps_the_heap_small() -> None:
    schedule: Schedule[str] = Schedule()
    for i in range(10_000):
        schedule.set("t", float(i))
    assert len(schedule._heap) <= 2 + 64 + 1
    assert schedule.pop_due(20_000.0, 10) == ["t"]
    assert schedule.pop_due(20_000.0, 10) == []


def test_a_burst_of_due_keys_is_handed_out_in_bounded_slices() -> None:
    schedule: Schedule[int] = Schedule()
    for key in range(1_000):
        schedule.set(key, 0.0)
    slices = []
    while batch := schedule.pop_due(1.0, 100):
        slices.append(batch)
    assert [len(s) for s in slices] == [100] * 10
    assert sorted(k for s in slices for k in s) == list(range(1_000))
