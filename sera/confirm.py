"""`python -m sera.confirm`: the command line of sera.studies.confirm (sera.studies.confirm.cli),
under the name the stored runs' provenance records. In code, import sera.studies.confirm."""

import sys

from sera.studies.confirm.cli import main

if __name__ == "__main__":
    sys.exit(main())
