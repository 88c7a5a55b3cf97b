#!/bin/bash
# Writes jobs/job_body.sh below the header of every jobs/*.sbatch (the lines up to and
# including its `tag=` line), so the scripts share one body and each stays a single file,
# as sbatch needs. --check: change nothing, exit 1 naming each script whose body differs.
# Usage: scripts/job_scripts.sh [--check]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
body=$root/jobs/job_body.sh
check=0
[ "${1:-}" = --check ] && check=1
stale=0
for script in "$root"/jobs/*.sbatch; do
    n=$(grep -n -m1 '^tag=' "$script" | cut -d: -f1) ||
        { echo "job_scripts.sh: $script has no tag= line ending its header" >&2; exit 1; }
    want=$(head -n "$n" "$script"; cat "$body")
    if [ "$want" = "$(cat "$script")" ]; then continue; fi
    if [ $check = 1 ]; then
        echo "job_scripts.sh: ${script#"$root"/} does not end in jobs/job_body.sh" \
            "(run scripts/job_scripts.sh)" >&2
        stale=1
    else
        printf '%s\n' "$want" > "$script.tmp" && chmod --reference="$script" "$script.tmp" &&
            mv "$script.tmp" "$script"
        echo "job_scripts.sh: wrote ${script#"$root"/}"
    fi
done
exit $stale
