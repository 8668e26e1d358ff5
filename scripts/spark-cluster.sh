#!/usr/bin/env bash
# A standalone Spark cluster on this machine (one master, two workers), and spark-submit of a
# gossamer command to it. The pyspark wheel ships bin/spark-class, not sbin/start-master.sh.
#
#   scripts/spark-cluster.sh start [DIR]    start master + 2 workers; prints the master URL
#                                           (spark://127.0.0.1:PORT); state and logs in DIR
#                                           (default .spark-cluster)
#   scripts/spark-cluster.sh stop [DIR]     stop them
#   scripts/spark-cluster.sh submit URL GOSSAMER-ARGS...
#                                           pack src/gossamer into dist/gossamer.zip and run
#                                           `gossamer GOSSAMER-ARGS` on the cluster through
#                                           spark-submit (scripts/spark_entry.py)
#
# Environment: SPARK_WORKER_CORES (default 1 per worker), SPARK_WORKER_MEMORY (default 2g),
# SPARK_CLUSTER_HOST (default 127.0.0.1; set a routable address to add workers elsewhere),
# SPARK_CLUSTER_TIMEOUT (seconds to wait for each JVM to come up, default 180).
# Workers run this checkout's .venv Python, so every executor imports the same gossamer.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=$root/.venv/bin/python
[ -x "$python" ] || { echo "no .venv: run scripts/setup.sh first" >&2; exit 2; }
spark_home=$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
spark_class=$spark_home/bin/spark-class
host=${SPARK_CLUSTER_HOST:-127.0.0.1}
# every JVM here (master, workers, executors, the submitted driver) binds this address only
export SPARK_LOCAL_IP=$host

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_line() {  # FILE PATTERN SECONDS: wait until FILE has a line matching PATTERN
  local file=$1 pattern=$2 limit=$3 waited=0
  until grep -q "$pattern" "$file" 2>/dev/null; do
    if [ "$waited" -ge $((limit * 10)) ]; then
      echo "timed out after ${limit}s waiting for '$pattern' in $file:" >&2
      tail -20 "$file" >&2 || true
      return 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
}

start() {
  local dir=${1:-.spark-cluster}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/master.url" ]; then
    echo "a cluster is already recorded in $dir (stop it first)" >&2
    exit 2
  fi
  local port ui
  port=$(free_port)
  ui=$(free_port)
  export PYSPARK_PYTHON=$python SPARK_LOG_DIR=$dir SPARK_WORKER_DIR=$dir/work
  export SPARK_NO_DAEMONIZE=1
  "$spark_class" org.apache.spark.deploy.master.Master --host "$host" --port "$port" \
    --webui-port "$ui" >"$dir/master.log" 2>&1 &
  echo $! >"$dir/master.pid"
  local url="spark://$host:$port"
  wait_for_line "$dir/master.log" "I have been elected leader" "${SPARK_CLUSTER_TIMEOUT:-180}" || { stop "$dir"; exit 1; }
  for i in 1 2; do
    "$spark_class" org.apache.spark.deploy.worker.Worker --host "$host" \
      --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-2g}" \
      --webui-port "$(free_port)" --work-dir "$dir/work" "$url" >"$dir/worker$i.log" 2>&1 &
    echo $! >"$dir/worker$i.pid"
  done
  for i in 1 2; do
    wait_for_line "$dir/worker$i.log" "Successfully registered with master" "${SPARK_CLUSTER_TIMEOUT:-180}" || { stop "$dir"; exit 1; }
  done
  echo "$url" >"$dir/master.url"
  echo "$url"
}

stop() {
  local dir=${1:-.spark-cluster}
  [ -d "$dir" ] || { echo "no cluster in $dir" >&2; exit 2; }
  for name in worker1 worker2 master; do
    if [ -f "$dir/$name.pid" ]; then
      kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
      rm -f "$dir/$name.pid"
    fi
  done
  rm -f "$dir/master.url"
}

submit() {
  local url=${1:?submit needs the master URL (spark://HOST:PORT)}
  shift
  mkdir -p dist
  # the package as spark-submit ships it to the executors (--py-files); zip is not always
  # installed, Python's zipfile is
  "$python" - <<'EOF'
import pathlib, zipfile
with zipfile.ZipFile("dist/gossamer.zip", "w", zipfile.ZIP_DEFLATED) as archive:
    for path in sorted(pathlib.Path("src/gossamer").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            archive.write(path, path.relative_to("src"))
EOF
  PYSPARK_PYTHON=$python PYSPARK_DRIVER_PYTHON=$python \
    "$spark_home/bin/spark-submit" --master "$url" --py-files dist/gossamer.zip \
    --conf "spark.driver.host=$host" --conf "spark.driver.bindAddress=$host" \
    scripts/spark_entry.py "$@"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  submit) shift; submit "$@" ;;
  *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
