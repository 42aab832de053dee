"""`assistant bench`: speed, exactness and attribution quality of every strategy on the benchmark data."""


def register(commands) -> None:
    parser = commands.add_parser("bench", help="measure strategies on the benchmark data")
    parser.set_defaults(run=lambda args: print("not built yet") or 1)
