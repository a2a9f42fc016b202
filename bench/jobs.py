"""The first-job probe, identical for slurmpod and the floor: run inside the controller node.

One ``bash -c`` submits ``sbatch --partition=compute --wrap=hostname`` and polls ``scontrol show job``
every 0.1 s until the job ends, printing in-node wall-clock stamps, so no client start-up cost sits in
the polling loop and both paths do exactly the same work inside the node.
"""

from __future__ import annotations

from dataclasses import dataclass

JOB_TIMEOUT = 120.0

PROBE_SCRIPT = r"""
set -u
cd /home
t_submit=$(date +%s.%N)
j=$(sbatch --parsable --partition=compute --wrap=hostname) || exit 2
j=${j%%;*}
end=$(( $(date +%s) + 110 ))
while [ "$(date +%s)" -lt "$end" ]; do
  s=$(scontrol show job -o "$j" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
  s=${s#JobState=}
  case "$s" in
    COMPLETED) echo "PROBE $j $s $t_submit $(date +%s.%N)"; exit 0 ;;
    FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)
      echo "PROBE $j $s $t_submit $(date +%s.%N)"; exit 1 ;;
  esac
  sleep 0.1
done
echo "PROBE $j TIMEOUT $t_submit $(date +%s.%N)"
exit 3
"""

PROBE_ARGV = ("bash", "-c", PROBE_SCRIPT)


class ProbeError(RuntimeError):
    """The first job did not complete."""


@dataclass(frozen=True)
class ProbeResult:
    job_id: str
    state: str
    submitted_at: float  # wall clock (time.time()) inside the node when sbatch was called
    completed_at: float  # wall clock when COMPLETED was first seen

    @property
    def sbatch_to_completed(self) -> float:
        return self.completed_at - self.submitted_at


def parse_probe(returncode: int, stdout: str, stderr: str) -> ProbeResult:
    """The ``PROBE`` line of the script's output; ``ProbeError`` unless the job COMPLETED."""
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == "PROBE":
            res = ProbeResult(words[1], words[2], float(words[3]), float(words[4]))
            if returncode == 0 and res.state == "COMPLETED":
                return res
            raise ProbeError(f"job {res.job_id} ended {res.state}")
    raise ProbeError(f"probe failed (exit {returncode}): {(stderr or stdout).strip()[-500:]}")
