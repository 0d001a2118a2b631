#!/bin/bash
# step.sh TAG WHAT COMMAND...: a long quiet step (apt, pip, an image) as two lines, one when it
# starts and one with its elapsed seconds when it ends, so a slow step is told from a hung one.
# On failure: the step's name, its time and COMMAND's exit status.
set -uo pipefail
tag=$1 what=$2; shift 2
t0=$(date +%s)
echo "[$tag] $what ..." >&2
"$@"; rc=$?
if [ $rc != 0 ]; then echo "[$tag] $what: FAILED (exit $rc) after $(($(date +%s) - t0)) s" >&2; exit $rc; fi
echo "[$tag] $what: done in $(($(date +%s) - t0)) s" >&2
