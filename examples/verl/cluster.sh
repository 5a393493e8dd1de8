#!/usr/bin/env bash
# SERA in verl on a Ray cluster of NNODES nodes with 8 GPUs each.
#
#   bash examples/verl/cluster.sh head                  # on the first node
#   bash examples/verl/cluster.sh worker HEAD_ADDRESS   # on every other node
#   NNODES=4 MODEL=... DATA=... CKPT=... bash examples/verl/cluster.sh train   # on the head
#
# Every node needs the same environment (`pip install -e ".[scale]"` from a checkout at the same
# path: verl loads the reward function by file path, and Ray's setup hook imports
# sera.integrations.verl in every worker), and MODEL, DATA and CKPT on storage all nodes see.
# RAY replaces the ray command (the tests print its arguments).
set -euo pipefail
RAY=${RAY:-ray}
PORT=${PORT:-6379}
case "${1:-}" in
  head)
    $RAY start --head --port="$PORT" --num-gpus=8 ;;
  worker)
    $RAY start --address="${2:?give the address of the head node}:$PORT" --num-gpus=8 ;;
  train)
    shift
    NNODES=${NNODES:?set NNODES to the number of nodes} \
      bash "$(dirname "$0")/single_node.sh" +ray_kwargs.ray_init.address=auto "$@" ;;
  *)
    echo "usage: cluster.sh head | worker HEAD_ADDRESS | train [verl overrides]" >&2
    exit 2 ;;
esac
