"""A user's package, named on the command line as `userpkg.torsos:UserTorso` (tests/cli/test_cli_specs.py).

It is a package of its own, not `tests.test_compose`: pgx installs a top-level `tests` package into
site-packages, which shadows this repository's `tests` directory (a namespace package) on import."""
