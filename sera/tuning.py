"""`python -m sera.tuning`: the command line of sera.studies.tuning, under the name the stored
runs' provenance records. In code, import sera.studies.tuning."""

import sys

from sera.studies.tuning import main

if __name__ == "__main__":
    sys.exit(main())
