"""``rlpost show [overrides]``: the composed config (secrets redacted) and a plain-language explanation of
the run (rlpost/tools/explain.py). Composed and built once through the launch path (rlpost/app.py); nothing runs."""

from __future__ import annotations

from rlpost.app import fail, validate
from rlpost.core.errors import ConfigError


def main(args: list[str]) -> int:
    from rlpost.core.secrets import redacted_yaml
    from rlpost.tools.explain import explain

    try:
        (job,) = validate(args, multirun=False)
    except ConfigError as err:
        return fail(str(err))
    print(redacted_yaml(job.cfg))  # reliability: secrets never printed
    print(explain(job.built))
    return 0
