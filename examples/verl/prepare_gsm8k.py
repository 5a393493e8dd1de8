"""GSM8K (training) and GSM8K-Platinum (validation) from local files, as verl's parquet.

    python examples/verl/prepare_gsm8k.py --train /data/gsm8k/train.jsonl \
        --test /data/gsm8k-platinum/test.jsonl --out /data/sera-gsm8k

Writes OUT/train.parquet and OUT/test.parquet (sera.integrations.gsm8k.verl_table: the paper's
prompt, the ground truth, and a unique extra_info.index per row, which SERA keys its history by).
Files are read from local paths only: download openai/gsm8k (main) and madrylab/gsm8k-platinum
(main, test) where a network is reachable and copy them over.
"""

import argparse
from pathlib import Path

from sera.integrations.gsm8k import verl_table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, type=Path, help="GSM8K's training file")
    parser.add_argument("--test", required=True, type=Path, help="GSM8K-Platinum's test file")
    parser.add_argument("--out", required=True, type=Path, help="folder for the two parquets")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, path, source in (("train", args.train, "openai/gsm8k"),
                               ("test", args.test, "madrylab/gsm8k-platinum")):
        table = verl_table(path, split=name, data_source=source)
        table.to_parquet(args.out / f"{name}.parquet")
        print(f"{args.out / f'{name}.parquet'}: {len(table)} questions from {path}")


if __name__ == "__main__":
    main()
