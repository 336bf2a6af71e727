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
const FilesystemStore = require(path.join(base, 'stores', 'filesystem.js'));
const S3Object = require(path.join(base, 'models', 'object.js'));
const objectController = require(path.join(base, 'controllers', 'object.js'));
const { createReadStream } = require('fs');

// Range as S3 answers it. s3rver 4.0.4 reads "bytes=0-0" as the whole object (an
// end of 0 is taken for none), "bytes=-N" as the first N+1 bytes, and answers 416
// to a range S3 ignores. The header is made a plain first-last range here, or
// dropped where S3 sends the whole object, and the store reads an end of 0 as 0.
const getObject = objectController.getObject;
objectController.getObject = async function (ctx) {
  const range = ctx.headers.range;
  if (range !== undefined) {
    const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
    if (!m || (m[1] === '' && m[2] === '') ||
        (m[1] !== '' && m[2] !== '' && Number(m[2]) < Number(m[1]))) {
      delete ctx.headers.range; // not a single valid range: S3 ignores it
    } else if (m[1] === '') {
      // the last N bytes; N = 0 is unsatisfiable
      const meta = await ctx.store
        .getMetadata(ctx.params.bucket, ctx.params.key)
        .catch(() => null);
      if (meta) {
        const size = Number(meta['content-length']);
        const n = Number(m[2]);
        ctx.headers.range =
          n === 0 ? `bytes=${size}-` : `bytes=${Math.max(0, size - n)}-${size - 1}`;
      }
    }
  }
  return getObject(ctx);
};
FilesystemStore.prototype.getObject = async function (bucket, key, options) {
  try {
    const metadata = await this.getMetadata(bucket, key);
    const size = Number(metadata['content-length']);
    const ranged = !!options && (options.start !== undefined || options.end !== undefined);
    const range = {
      start: (options && options.start) || 0,
      end: Math.min(options && options.end !== undefined ? options.end : Infinity, size - 1),
    };
    if (ranged && (range.start >= size || range.end < range.start)) {
      const object = new S3Object(bucket, key, null, metadata);
      object.range = range; // 416
      return object;
    }
    const stream = await new Promise((resolve, reject) => {
      const s = createReadStream(this.getResourcePath(bucket, key, 'object'),
                                 size > 0 ? range : {});
      s.on('error', reject).on('open', () => resolve(s));
    });
    const object = new S3Object(bucket, key, stream, metadata);
    if (ranged) object.range = range;
    return object;
  } catch (err) {
    if (err.code === 'ENOENT') return null;
    throw err;
  }
};

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
