#!/usr/bin/env bash
# Starts three meshnode processes on loopback, joined into one mesh, and prints how to
# reach each. Ctrl-C drains and stops all three. Logs go to bin/cluster/node-N.log.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/meshnode ./cmd/meshnode
mkdir -p bin/cluster
pids=()
stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait
}
trap stop INT TERM EXIT
for i in 0 1 2; do
  args=(--node-id "node-$i"
        --stream "tcp://127.0.0.1:74${i}0" --stream "ws://127.0.0.1:74${i}1/"
        --admin "127.0.0.1:946$((4 + i))"
        --mesh "127.0.0.1:$((7946 + i))" --remote "127.0.0.1:$((8090 + i))"
        --mesh-timing local)
  if [ "$i" -gt 0 ]; then args+=(--join 127.0.0.1:7946); fi
  ./bin/meshnode "${args[@]}" > "bin/cluster/node-$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 50); do
    grep -q "ready" "bin/cluster/node-$i.log" && break
    sleep 0.1
  done
done
echo "three meshnodes joined in one mesh:"
for i in 0 1 2; do
  echo "  node-$i  stream tcp://127.0.0.1:74${i}0  ws://127.0.0.1:74${i}1/  admin http://127.0.0.1:946$((4 + i))  mesh 127.0.0.1:$((7946 + i))"
done
echo "members: ./bin/meshnode members --admin 127.0.0.1:9464    (Ctrl-C stops the cluster)"
wait
