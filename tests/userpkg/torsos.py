"""A user's torso module (see the package's docstring)."""

from test_compose import UserTorso as UserTorso
