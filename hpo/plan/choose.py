"""Which option to recommend, and why, in one sentence."""

from __future__ import annotations

from hpo.plan.types import PlanOption


def held(option: PlanOption) -> float:
    """The resources an option holds (a GPU counts as 16 CPUs), to break ties where nothing has a price."""
    return option.max_concurrent * option.workers_per_trial * (option.cpus_per_worker + 16 * option.gpus_per_worker)


def recommend(options: list[PlanOption], deadline_s: float | None, confidence: float,
              currency: str = "$") -> tuple[PlanOption | None, str]:
    """The option to run and one sentence on why.

    With a deadline: the cheapest option whose ``p_meet`` reaches ``confidence`` (of equal cost, the one
    holding least, then the fastest); where none reaches it, the likeliest to meet the deadline. Without one:
    the fastest per unit cost (least wall time × cost; without prices, × resources held).
    """
    if not options:
        return None, "no shape fits the cluster"
    if deadline_s is None:
        priced = any(o.cost_median > 0 for o in options)
        best = min(options, key=lambda o: (o.wall_s_median * (o.cost_median if priced else held(o)),
                                           o.wall_s_median))
        return best, (f"{_label(best)} is the fastest per unit cost: ~{duration(best.wall_s_median)} "
                      f"for {_money(best.cost_median, currency) if priced else _held(best)}")
    meets = [o for o in options if (o.p_meet or 0.0) >= confidence]
    if meets:
        best = min(meets, key=lambda o: (round(o.cost_median, 6), held(o), o.wall_s_median))
        cost = _money(best.cost_median, currency) if best.cost_median > 0 else _held(best)
        return best, (f"{_label(best)} is the cheapest option that ends within {duration(deadline_s)} with "
                      f"probability ≥ {confidence:.0%} ({best.p_meet:.0%}, ~{duration(best.wall_s_median)}, "
                      f"{cost})")
    best = max(options, key=lambda o: (o.p_meet or 0.0, -o.wall_s_median))
    return best, (f"no option ends within {duration(deadline_s)} with probability ≥ {confidence:.0%}; "
                  f"{_label(best)} comes closest ({(best.p_meet or 0.0):.0%}, ~{duration(best.wall_s_median)})")


def _label(option: PlanOption) -> str:
    trials, workers = option.max_concurrent, option.workers_per_trial
    return f"{trials} trial{'s' * (trials != 1)} at once × {workers} worker{'s' * (workers != 1)}"


def _held(option: PlanOption) -> str:
    cpus = option.max_concurrent * option.workers_per_trial * option.cpus_per_worker
    gpus = option.max_concurrent * option.workers_per_trial * option.gpus_per_worker
    return f"{cpus:g} CPUs" + (f" and {gpus:g} GPUs" if gpus else "")


def _money(value: float, currency: str) -> str:
    return f"{currency}{value:,.2f}" if value >= 0.1 else f"{currency}{value:.4f}"


def duration(seconds: float) -> str:
    """Seconds as ``1h05m``, ``4m10s``, ``42s``."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.0f}s"
