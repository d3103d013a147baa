"""One resolution of a run's StarPU environment, per machine type, handed whole to every engine.

Precedence, lowest first (docs/interfaces.md §6.1), on every machine type of the cluster:

1. the factor rules of config/factors.yaml evaluated on that machine (letters not given at -1;
   letters that a campaign's `factor_env` defines are left at -1 here, their variables come next),
2. the variables of `factor_env` for the letters it defines (experiment key, explicit levels),
3. `--sched`,
4. the user's raw variables (`--env`, the experiment's `env`).

The result is split as engines and runs.csv carry it: `common` (identical on every machine type)
and `per_machine` (what differs, or exists on some machine types only). Before this module the
per-machine part was recomputed from the rules inside the numasim engine, so on a mixed cluster
it overrode the user's and `factor_env`'s variables, and the other engines never received it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunEnv:
    """A run's StarPU variables: `common` to every machine type, plus `per_machine` differences."""

    common: dict[str, str]
    per_machine: dict[str, dict[str, str]] = field(default_factory=dict)

    def spec_fields(self) -> dict[str, dict]:
        """The RunSpec fields (`env`, `env_per_machine`) that carry it."""
        return {"env": dict(self.common), "env_per_machine": {m: dict(e) for m, e in self.per_machine.items()}}

    def of_machine(self, machine: str) -> dict[str, str]:
        """The whole environment of a rank on `machine`."""
        return {**self.common, **self.per_machine.get(machine, {})}


def split_common(envs: dict[str, dict[str, str]]) -> RunEnv:
    """{machine: whole environment} -> the variables equal everywhere and the rest per machine."""
    if not envs:
        return RunEnv({}, {})
    values = list(envs.values())
    common = {k: v for k, v in values[0].items() if all(e.get(k) == v for e in values[1:])}
    rest = {m: dict(sorted((k, v) for k, v in e.items() if k not in common)) for m, e in envs.items()}
    return RunEnv(dict(sorted(common.items())), rest)


def resolve_run_env(cluster: Any, levels: dict[str, int], user_env: dict[str, str] | None = None,
                    sched: str | None = None, factor_env: dict[str, dict[str, dict[str, str]]] | None = None
                    ) -> RunEnv:
    """The environment of a run on `cluster` (a name, a path or a loaded `Cluster`) at the factor
    `levels`; `factor_env` is the experiment key {letter: {low: {...}, high: {...}}}."""
    from testbed.run.factors import check_factors, cluster_machines, env_for_node

    factor_env = factor_env or {}
    explicit = {k: v for letter, e in sorted(factor_env.items())
                for k, v in e["low" if levels.get(letter, -1) == -1 else "high"].items()}
    ruled = check_factors({f: lv for f, lv in levels.items() if f not in factor_env})
    overrides = {**explicit, **({"STARPU_SCHED": sched} if sched else {}), **(user_env or {})}
    whole = {m.name: {**env_for_node(m, ruled), **overrides} for m in cluster_machines(cluster)}
    return split_common(whole)
