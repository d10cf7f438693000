"""Every rule example still names its rule when the line arrives the way pastes and log collectors
deliver it (#34, "damaged lines"): quoted in Markdown, under docker compose's, kubectl's
--timestamps, syslog's, Ray's, torchrun --tee's, srun --label's, mpirun's and pdsh's prefixes, a
logger's head, coloured, with CRLF ends. One damage per example, taken in turn, so every damage
meets every kind of rule across the catalogue at the cost of one diagnosis per example."""

from __future__ import annotations

from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths

DAMAGES = {
    "markdown quote": lambda line: "> " + line,
    "docker compose": lambda line: "trainer-1  | " + line,
    "kubectl --timestamps": lambda line: "2024-05-02T10:11:12.123456789Z " + line,
    "syslog": lambda line: "May 02 10:11:12 node-3 python[4242]: " + line,
    "ANSI colour": lambda line: "\x1b[31m" + line + "\x1b[0m",
    "CRLF": lambda line: line + "\r",
    "Ray actor": lambda line: "(RayTrainWorker pid=1234, ip=10.0.0.1) " + line,
    "torchrun --tee": lambda line: "[default3]:" + line,
    "srun --label": lambda line: "3: " + line,
    "pdsh": lambda line: "node-3: " + line,
    "logging head": lambda line: "2024-05-02 10:11:12,123 - root - ERROR - " + line,
}


def test_every_rules_example_is_found_however_the_paste_damaged_its_lines(tmp_path: Path) -> None:
    catalogue = load_catalogue(include_user=False)
    log = tmp_path / "paste.log"
    damages = list(DAMAGES.items())
    missed, tried = [], 0
    for rule in catalogue.rules:
        for example in rule.examples_match:
            # Horovod's stall list under mpirun's tag: a third prefix on top is more than any tool writes.
            if example.startswith("[1,0]<stderr>:0: "):
                continue
            name, damage = damages[tried % len(damages)]
            tried += 1
            log.write_bytes("".join(damage(line) + "\n" for line in example.split("\n")).encode())
            if rule.id not in [f.rule for f in diagnose_paths([log], catalogue).findings]:
                missed.append((name, rule.id, example[:100]))
    assert tried > 900 and not missed, missed
