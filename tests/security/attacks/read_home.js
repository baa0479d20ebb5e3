// Attack from Node: read the user's SSH key and list the home directory.
// argv[2] is a JSON list of paths to read.
const fs = require("fs");
const result = {};
for (const path of JSON.parse(process.argv[2])) {
  try {
    result[path] = fs.readFileSync(path, "utf8").slice(0, 64);
  } catch (e) {
    result[path] = "error: " + e.code;
  }
}
console.log(JSON.stringify(result));
