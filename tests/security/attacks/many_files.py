"""Attack: eat kernel memory with empty files in the private tmpfs.

argv[1] is a JSON list of directories; in each, creates empty files until an error
(or argv[2] files). Prints, per directory, how many it made and why it stopped.
"""

import errno
import json
import os
import sys

result = {}
cap = int(sys.argv[2])
for directory in json.loads(sys.argv[1]):
    made, end = 0, "reached cap"
    try:
        while made < cap:
            os.close(os.open(f"{directory}/f{made}", os.O_CREAT | os.O_WRONLY, 0o600))
            made += 1
    except OSError as exc:
        end = errno.errorcode.get(exc.errno, str(exc.errno))
    result[directory] = {"files": made, "end": end}
print(json.dumps(result))
