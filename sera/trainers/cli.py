"""Command lines built from config dataclasses: every field is a flag showing its docstring, its
default and its allowed choices (tyro), and --preset picks the defaults from the package's
presets, the same ones the notebooks use."""

from __future__ import annotations

import argparse


def parse(config_type, presets: dict, argv=None, description: str = ""):
    """A config_type built from --preset NAME (default: the first preset) and the flags."""
    import tyro

    names = list(presets)
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--preset", choices=names, default=names[0])
    chosen, rest = first.parse_known_args(argv)
    text = (f"{description.strip()}\n\n--preset {{{','.join(names)}}} picks the defaults shown "
            f"below (default {names[0]}; shown: {chosen.preset}).")
    return tyro.cli(config_type, default=presets[chosen.preset], args=rest, description=text)
