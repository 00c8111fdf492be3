#!/usr/bin/env bash
# Stop the one-node SLURM of slurm/local/start.sh (make slurm-stop); jobs still running are cancelled.
set -uo pipefail
command -v scancel >/dev/null && scancel --user "$(id -un)" 2>/dev/null
pkill -x slurmd 2>/dev/null
pkill -x slurmctld 2>/dev/null
pkill -x slurmdbd 2>/dev/null
pkill -x munged 2>/dev/null
[[ -x /etc/init.d/mariadb ]] && pgrep -x mariadbd >/dev/null && /etc/init.d/mariadb stop >/dev/null
echo "slurm: stopped"
