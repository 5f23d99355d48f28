"""``python -m containers engine|up|down|leftovers``: what ``./dev compose`` calls."""

from __future__ import annotations

import sys

from containers import compose_stack, engine
from containers.engine import EngineError


def _say(message: str) -> None:
    print(f"[compose] {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else "help"
    try:
        if verb == "engine":
            found = engine.ensure()
            how = "started here" if found.started_here else "already running"
            _say(f"Docker engine {found.server_version} ({how})")
        elif verb == "up":
            stack = compose_stack.up(_say)
            _say(f"up: project {stack.project}; for clients on this host:")
            env_file = compose_stack.ENV_FILE
            for key, value in stack.client_env().items():
                if key == "AWS_SECRET_ACCESS_KEY":  # read from its 0600 file, never printed
                    print(f"export {key}=\"$(sed -n 's/^SEGCAT_S3_SECRET_KEY=//p' {env_file})\"")
                else:
                    print(f"export {key}={value}")
            print(f"# dashboard: {stack.dashboard_url}/?token=<SEGCAT_SERVE_TOKEN in {env_file}>")
        elif verb == "down":
            compose_stack.down(_say)
            if engine.stop():
                _say("stopped the Docker engine started here")
        elif verb == "leftovers":
            found_left = engine.leftovers()
            for item in found_left:
                _say(f"left behind: {item}")
            if not found_left:
                _say("nothing left behind: no engine started here runs, no bridge, no DOCKER rule")
            return 1 if found_left else 0
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except EngineError as exc:
        _say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
