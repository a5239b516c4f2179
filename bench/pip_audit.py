"""``make check``'s dependency audit: ``pip-audit`` over the virtual environment, honest about
what it could not see.

- A known vulnerability fails the check (exit 1), each one listed with its fix version.
- When the vulnerability service cannot be reached (offline, firewalled), or answers for
  none of the packages (a private mirror without PyPI's JSON API), the check says so and
  passes: an audit that could not run is reported as not run, never as clean.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 180


def audit(service: str) -> tuple[list[dict] | None, str]:
    """The dependencies pip-audit reported using ``service``, or None and why not."""
    pip_audit = Path(sys.executable).with_name("pip-audit")
    cmd = [str(pip_audit), "--format", "json", "--skip-editable", "--progress-spinner", "off"]
    try:
        proc = subprocess.run(
            [*cmd, "--vulnerability-service", service],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"{service}: no answer in {TIMEOUT_S} s"
    try:
        deps = json.loads(proc.stdout).get("dependencies", [])
    except json.JSONDecodeError:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{service}: could not be reached ({last.split(': ', 1)[0][:120]})"
    if deps and all(d.get("skip_reason") for d in deps):
        return None, f"{service}: no vulnerability data for any of {len(deps)} packages"
    return deps, ""


def main() -> int:
    reasons = []
    for service in ("pypi", "osv"):  # PyPI's JSON API first; OSV when a mirror lacks it
        deps, why = audit(service)
        if deps is not None:
            break
        reasons.append(why)
    else:
        print(f"pip-audit: dependencies NOT audited ({'; '.join(reasons)})")
        return 0
    skipped = [d for d in deps if d.get("skip_reason")]
    audited = [d for d in deps if not d.get("skip_reason")]
    vulnerable = [d for d in audited if d.get("vulns")]
    for dep in vulnerable:
        for vuln in dep["vulns"]:
            fixes = ", ".join(vuln.get("fix_versions", [])) or "no fix released"
            print(f"{dep['name']} {dep['version']}: {vuln['id']} (fixed in: {fixes})")
    if vulnerable:
        print(f"pip-audit: {len(vulnerable)} of {len(audited)} audited packages are vulnerable")
        return 1
    print(
        f"pip-audit ({service}): {len(audited)} packages audited, no known vulnerabilities"
        + (f"; {len(skipped)} unknown to the registry, not audited" if skipped else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
