"""Attack: write where it was not granted.

argv[1] is a JSON list of paths to create. A path written ``open:/path`` is only
opened for writing, never written (for kernel files where a successful write
would hurt the machine running the tests). Prints which attempts succeeded.
"""

import json
import os
import sys

written = []
for path in json.loads(sys.argv[1]):
    try:
        if path.startswith("open:"):
            os.close(os.open(path[5:], os.O_WRONLY))
        else:
            with open(path, "w") as f:
                f.write("owned by the extension\n")
        written.append(path)
    except OSError:
        pass
print(json.dumps({"written": written}))
