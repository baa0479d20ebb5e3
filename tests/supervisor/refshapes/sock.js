// What tsx's CLI does first: listen on a unix socket in /tmp.
const net = require("net");
net.createServer().listen(`/tmp/refsock-${process.pid}.pipe`);
