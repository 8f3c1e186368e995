#!/bin/bash
# A throwaway one-node Slurm cluster for tests: slurmctld and slurmd of Debian's slurm-wlm,
# authenticated by munge, configured in DIR (no system files touched).
#   tests/slurm/cluster.sh start DIR   -> prints the SLURM_CONF path once the node is idle
#   tests/slurm/cluster.sh stop DIR
set -euo pipefail
cmd=$1 dir=$2
conf=$dir/slurm.conf
case "$cmd" in
start)
  mkdir -p "$dir"/{state,spool,log,tmp}
  host=$(hostname -s)
  port=$((20000 + RANDOM % 20000))
  # the machine's CPUs, whatever OMP_NUM_THREADS says (GNU nproc honours it: with
  # OMP_NUM_THREADS=1 a 2-task job would wait forever for a second CPU)
  cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc --all)
  # memory Slurm may hand out (--mem is checked against it): 90 % of MemTotal, in MB
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 * 0.9 / 1024 }' /proc/meminfo)
  cat > "$conf" <<CONF
ClusterName=outlierlab-test
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
# the steps' scratch (PMIx's spmix_appdir_<uid>_<job>.<step>) in this cluster's own directory:
# every throwaway cluster numbers its jobs from 1, and a killed run's directories in /tmp
# would make the next cluster's step launch fail ("File exists")
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    runuser -u munge -- /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
  fi
  slurmctld -D -f "$conf" >"$dir/log/ctld.out" 2>&1 &
  echo $! >"$dir/ctld.pid"
  slurmd -D -f "$conf" >"$dir/log/d.out" 2>&1 &
  echo $! >"$dir/d.pid"
  for _ in $(seq 1 60); do
    if SLURM_CONF=$conf sinfo -h -o %t 2>/dev/null | grep -q idle; then echo "$conf"; exit 0; fi
    sleep 0.5
  done
  echo "cluster.sh: the node did not become idle; see $dir/log" >&2
  exit 1 ;;
stop)
  # cancel what is still queued or running first: slurmd leaves running steps behind
  if [ -f "$conf" ]; then
    SLURM_CONF=$conf timeout 15 scancel --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 20); do
      [ -z "$(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for p in ctld d; do
    [ -f "$dir/$p.pid" ] || continue
    pid=$(cat "$dir/$p.pid")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  done ;;
esac
