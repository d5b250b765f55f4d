"""The process: settings from the environment, logging, metrics, the courtesy of the loops to the API that shares
their process, and the programs beside `serve` — the demo, the pull member's agent, the loops' metrics server — and
what the tests and benchmarks use to run a broker (`testing`)."""
