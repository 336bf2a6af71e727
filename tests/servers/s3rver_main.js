'use strict';
// Starts s3rver (the fork that checks SigV4 signatures) on loopback with one
// access key, one bucket and no other credentials, and prints one line of JSON
// ({"address": ..., "port": ...}) once it listens. Run by servers.py:
//   node s3rver_main.js DIR ADDRESS PORT BUCKET ACCESS_KEY SECRET_KEY
// PORT 0 picks a free port. SIGTERM and SIGINT stop it.
const path = require('path');
const base = path.join(__dirname, 'node_modules', '@20minutes', 's3rver', 'lib');
const S3rver = require(path.join(base, 's3rver.js'));
const AWSAccount = require(path.join(base, 'models', 'account.js'));

const [directory, address, port, bucket, accessKey, secretKey] = process.argv.slice(2);
if (!secretKey) {
  console.error('usage: node s3rver_main.js DIR ADDRESS PORT BUCKET ACCESS_KEY SECRET_KEY');
  process.exit(2);
}
// only the configured key pair signs: the built-in S3RVER/S3RVER one is removed
AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
AWSAccount.DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);

const server = new S3rver({
  directory,
  address,
  port: Number(port),
  silent: true,
  vhostBuckets: false,
  allowMismatchedSignatures: false,
  configureBuckets: [{ name: bucket, configs: [] }],
});
server.run().then(
  (addr) => {
    process.stdout.write(JSON.stringify({ address: addr.address, port: addr.port }) + '\n');
  },
  (err) => {
    console.error('s3rver: ' + (err && err.stack ? err.stack : err));
    process.exit(1);
  },
);
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.close().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  });
}
