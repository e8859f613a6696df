"""Command groups of the ``gpusim`` command line; each module has ``register(subparsers)``."""
