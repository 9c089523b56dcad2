#!/usr/bin/python3
"""make_sched_fixture.py — reference values for lib/sched.c.

An independent, pure-Python (stdlib only) transcription of the ClassyVision / VISSL 0.1.5
parameter-scheduler formulas, written from shared/spec/vissl-behaviour-1.md §4 and
vissl-behaviour-2.md §7. It evaluates a set of schedulers (ids shared with
tests/unit/test_sched.c) on a grid of `where` values and writes
tests/golden/fixtures/sched/values.txt as "id where value" lines (17 significant digits).

Run from the repository root:  /usr/bin/python3 tests/golden/make_sched_fixture.py
"""
import bisect
import math
import os
import golden  # noqa: E402  (tests/golden/golden.py: where fixtures go, how arrays are saved)

WHERE_EPSILON = 1e-6


def constant(value):
    return lambda where: value


def linear(start, end):
    return lambda where: end * where + start * (1 - where)


def cosine(start, end):
    return lambda where: end + 0.5 * (start - end) * (1 + math.cos(math.pi * where))


def multistep(values, num_epochs, milestones=None):
    assert len(values) > 0 and num_epochs > 0 and num_epochs >= len(values)
    if milestones is None:
        width = math.ceil(num_epochs / float(len(values)))
        milestones = [width * (i + 1) for i in range(len(values) - 1)]
    assert len(milestones) == len(values) - 1
    prev = 0
    for m in milestones:
        assert prev < m < num_epochs
        prev = m

    def f(where):
        epoch = int((where + WHERE_EPSILON) * num_epochs)
        return values[bisect.bisect_right(milestones, epoch)]
    return f


def step(values, num_epochs):
    assert len(values) > 0 and num_epochs > 0
    return lambda where: values[int((where + WHERE_EPSILON) * len(values))]


def step_with_fixed_gamma(base_value, gamma, num_decays, num_epochs):
    assert base_value > 0 and gamma > 0 and num_decays > 0 and num_epochs > 0
    values = [base_value]
    for _ in range(num_decays):
        values.append(values[-1] * gamma)
    return step(values, num_epochs)


def composite(children, lengths, scaling):
    """children: built schedulers; scaling: 'rescaled' | 'fixed' per child."""
    assert len(children) == len(lengths) == len(scaling) and len(children) > 0
    assert abs(sum(lengths) - 1.0) < 1e-3
    lengths = list(lengths)
    if sum(lengths) != 1.0:
        lengths[-1] = 1.0 - sum(lengths[:-1])

    def f(where):
        i = 0
        total = lengths[0]
        while where + WHERE_EPSILON > total and i < len(children) - 1:
            i += 1
            total += lengths[i]
        w = where
        if scaling[i] == "rescaled":
            w = (where - (total - lengths[i])) / lengths[i]
        return children[i](w)
    f.lengths = lengths
    return f


def numpy_arange(start, stop, step):
    """numpy.arange for floats: length ceil((stop-start)/step); a[i] = start + i*(a[1]-a[0])."""
    n = max(math.ceil((stop - start) / step), 0)
    if n == 0:
        return []
    out = [start]
    if n > 1:
        out.append(start + step)
        delta = out[1] - out[0]
        out += [start + i * delta for i in range(2, n)]
    return out


def cosine_warm_restart(start, end, L, wave, lr_multiplier=1.0, adaptive=False):
    assert wave in ("half", "full") and L > 0
    steps = [0.0] + numpy_arange(L, 1.0, L if wave == "half" else 2 * L)
    maxima = []
    for k, rs in enumerate(steps):
        if not adaptive:
            maxima.append(start * lr_multiplier ** k)
        elif wave == "half":
            maxima.append(end + 0.5 * (start - end) * (1 + math.cos(math.pi * rs)))
        else:
            maxima.append(end + 0.5 * (start - end) * (1 + math.cos(math.pi * (L + rs))))

    def f(where):
        k = max(bisect.bisect_right(steps, where) - 1, 0)
        w = (where % L) / L if wave == "half" else where / L
        return end + 0.5 * (maxima[k] - end) * (1 + math.cos(math.pi * w))
    return f


def inverse_sqrt(start, warmup):
    decay = start * math.sqrt(warmup) if warmup > 0 else start
    return lambda where: decay * where ** -0.5 if where > 0 else decay


SCHEDULERS = {
    "constant": constant(0.1),
    "linear": linear(0.6, 4.8),
    "cosine_t1": cosine(0.15, 0.0),
    "cosine_ex3": cosine(4.8, 0.0048),
    "multistep_t2": multistep([0.1, 0.01, 0.001], 90, [30, 60]),
    "multistep_ex2": multistep([0.01, 0.001], 5, [1]),
    "multistep_default": multistep([0.1, 0.01, 0.001, 0.0001], 10),
    "step": step([1.0, 0.5, 0.25, 0.125, 0.0625], 10),
    "step_with_fixed_gamma_t8": step_with_fixed_gamma(0.1, 0.1, 3, 120),
    "composite_ex3": composite([linear(0.6, 4.8), cosine(4.8, 0.0048)], [0.1, 0.9],
                               ["rescaled", "fixed"]),
    "composite_ex5": composite([linear(0.6, 4.8), cosine_warm_restart(4.8, 0.0048, 0.334, "full")],
                               [0.1, 0.9], ["rescaled", "rescaled"]),
    "composite_ex6": composite([linear(0.6, 4.8), cosine(4.8, 0.0048), linear(0.0048, 2.114),
                                cosine(2.114, 0.0048)],
                               [0.0256, 0.48722, 0.0256, 0.46166], ["rescaled"] * 4),
    # Nested; the outer num_epochs (50) reaches the multistep (milestone 25) and the step.
    "composite_nested": composite(
        [multistep([1.0, 0.1], 50),
         composite([constant(0.5), step([0.3, 0.2, 0.1], 50)], [0.3, 0.7], ["fixed", "rescaled"])],
        [0.5, 0.5], ["rescaled", "rescaled"]),
    "cwr_half_t4": cosine_warm_restart(0.15, 0.00015, 0.5, "half"),
    "cwr_full_t5": cosine_warm_restart(4.8, 0.0048, 0.334, "full"),
    "cwr_half_adaptive": cosine_warm_restart(0.1, 0.0001, 0.5, "half", adaptive=True),
    "cwr_full_adaptive": cosine_warm_restart(0.1, 0.0001, 0.25, "full", adaptive=True),
    "cwr_half_mult": cosine_warm_restart(1.0, 0.01, 0.2, "half", lr_multiplier=0.5),
    "cwr_half_l01": cosine_warm_restart(0.1, 0.0, 0.1, "half", lr_multiplier=0.9),
    "inverse_sqrt_t6": inverse_sqrt(4.8, 0.1),
    "inverse_sqrt_nowarmup": inverse_sqrt(4.8, 0.0),
}

SPECIAL_WHERE = [
    1 / 3, 2 / 3, 0.333, 0.333333, 0.33333, 0.6666, 0.2499, 0.25 - 1e-7, 0.25 - 1e-6,
    0.25 - 2e-6, 0.1 - 2e-6, 0.1 - 1e-6, 0.1 - 1e-7, 0.1 + 1e-9, 0.05, 0.167, 0.334, 0.334 - 1e-9,
    0.55, 0.668, 0.9, 0.999, 0.9999, 0.5 - 1e-9, 0.5 - 1e-7, 0.0256, 0.51282, 0.53842,
    0.2, 0.4, 0.6, 0.8, 0.3, 0.7, 0.6 + 1e-12, 0.8 - 1e-12, 1e-9, 0.2 - 1e-7,
]


def grid():
    points = {i / 100 for i in range(100)} | set(SPECIAL_WHERE)
    return sorted(p for p in points if 0.0 <= p < 1.0)


def main():
    out_path = os.path.join(golden.out_dir("sched"), "values.txt")
    points = grid()
    with open(out_path, "w") as out:
        out.write("# made by tests/golden/make_sched_fixture.py — id where value (%.17g)\n")
        for name, f in SCHEDULERS.items():
            for where in points:
                out.write("%s %.17g %.17g\n" % (name, where, f(where)))
    print("wrote %s: %d schedulers x %d points" % (out_path, len(SCHEDULERS), len(points)))


if __name__ == "__main__":
    main()
