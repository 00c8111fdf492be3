#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests (`make slurm`; `make slurm-stop` stops it).
# Installs Debian's slurm-wlm and munge when missing (root), writes /etc/slurm/slurm.conf for this
# host's cores and memory, starts munged, slurmctld and slurmd, and waits until the node is idle.
# Accounting (sacct, and submitit's job states): slurmdbd on a local MariaDB, both from Debian, the
# database reached by root over its Unix socket (no password anywhere). ESC_SLURM_ACCOUNTING=0, or a
# machine where they cannot be installed: no accounting (sacct answers nothing; submitit warns).
# Idempotent: a running cluster with the same configuration is left as it is.
set -euo pipefail

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "error: slurm-wlm and munge are not installed, and installing needs root" >&2; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null
fi
accounting=${ESC_SLURM_ACCOUNTING:-1}
if [[ $accounting == 1 ]] && { ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; }; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmdbd mariadb-server >/dev/null 2>&1 ||
    { echo "slurm: slurmdbd and mariadb-server could not be installed: no accounting (sacct)" >&2; accounting=0; }
fi

host=$(hostname -s)
cpus=$(nproc)
# leave 1 GiB to the system: slurmd refuses a node that claims more memory than it has
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
conf=/etc/slurm/slurm.conf
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge

wanted=$(cat <<CONF
# written by slurm/local/start.sh (make slurm): a one-node cluster on $host for the repo's tests
ClusterName=esc-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=2048
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobCompType=jobcomp/filetxt
JobCompLoc=/var/log/slurm/jobcomp.log
AccountingStorageType=$([[ $accounting == 1 ]] && echo "accounting_storage/slurmdbd
AccountingStorageHost=localhost" || echo accounting_storage/none)
JobAcctGatherType=jobacct_gather/linux
KillWait=10
MinJobAge=600
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
)
changed=0
if [[ ! -f $conf ]] || [[ "$(cat "$conf")" != "$wanted" ]]; then
  printf '%s\n' "$wanted" > "$conf"
  changed=1
fi
# slurmd 22.05 reads cgroup.conf even with the plugins below (autodetect: v1 or v2)
[[ -f /etc/slurm/cgroup.conf ]] || echo "CgroupPlugin=autodetect" > /etc/slurm/cgroup.conf

if [[ ! -s /etc/munge/munge.key ]]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- munged

if [[ $accounting == 1 ]]; then  # MariaDB, then slurmdbd on it, then the cluster registered
  pgrep -x mariadbd >/dev/null || /etc/init.d/mariadb start >/dev/null
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db"
  dbd=/etc/slurm/slurmdbd.conf
  cat > "$dbd.new" <<DBD
# written by slurm/local/start.sh: accounting for the one-node test cluster
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
DBD
  chmod 600 "$dbd.new"
  if ! cmp -s "$dbd.new" "$dbd"; then mv "$dbd.new" "$dbd"; pkill -x slurmdbd 2>/dev/null || true; sleep 1; else rm -f "$dbd.new"; fi
  pgrep -x slurmdbd >/dev/null || slurmdbd
  for _ in $(seq 60); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.5; done
  sacctmgr -n show cluster format=cluster | grep -qw esc-local || sacctmgr -i add cluster esc-local >/dev/null
fi

if [[ $changed -eq 1 ]]; then  # a new configuration: restart the daemons, waiting until they are gone
  pkill -x slurmctld 2>/dev/null || true
  pkill -x slurmd 2>/dev/null || true
  for _ in $(seq 30); do { pgrep -x slurmctld || pgrep -x slurmd; } >/dev/null || break; sleep 0.5; done
fi
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  if [[ $state == idle* || $state == mixed* || $state == allocated* ]]; then
    echo "slurm: node $host ($cpus CPUs, $mem MB) $state; sinfo, squeue, sbatch$([[ $accounting == 1 ]] && echo ", sacct") ready"
    exit 0
  fi
  [[ $state == down* || $state == drain* ]] && scontrol update nodename="$host" state=resume 2>/dev/null || true
  sleep 1
done
echo "error: slurm: node $host did not become idle (state: ${state:-none}); see /var/log/slurm/" >&2
exit 1
