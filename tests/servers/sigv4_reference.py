#!/usr/bin/python3
"""botocore's Signature Version 4 of one request, step by step, for comparison with
ferry's signer.

    sigv4_reference.py [--text] < request.json      one request
    sigv4_reference.py --cases FILE [--check]       every case of a cases file: prints
                                                    it with "expected" filled in, or
                                                    with --check says which differ
    sigv4_reference.py --aws-suite DIR              checks this against AWS's published
                                                    test suite (.req/.creq/.sts/.authz)

A request (JSON):
    {"method": "GET",
     "url": "http://127.0.0.1:9000/bucket/key?list-type=2",  the query, if any, as sent
     "params": [["prefix", "a b/"], ...],  optional: appended to the URL's query,
                                           encoded as botocore encodes (RFC 3986)
     "headers": [["Range", "bytes=0-9"], ...],  (or an object)
     "body": "",                         optional, UTF-8
     "payload_hash": "UNSIGNED-PAYLOAD", optional: else the SHA-256 of the body
     "time": "20150830T123600Z",
     "region": "us-east-1", "service": "s3",
     "access_key": "...", "secret_key": "...", "session_token": null,
     "signer": "s3"}                      "s3": botocore.auth.S3SigV4Auth (no path
                                          normalisation, x-amz-content-sha256 sent);
                                          "generic": botocore.auth.SigV4Auth (the AWS
                                          test suite's rules); default: "s3" when
                                          service is "s3"

prints (JSON) {"canonical_request", "string_to_sign", "signature", "authorization",
"url", "headers": [[name, value], ...]}: the headers are those of the signed request
(X-Amz-Date, X-Amz-Content-SHA256, X-Amz-Security-Token added by the signer),
"url" the URL sent. --text prints the three texts in blocks instead.

This drives botocore's own methods in add_auth's order, with the time given instead
of the clock's; "payload_hash" replaces the payload's hash. Run it with Debian's
python3 (python3-botocore).
"""
import argparse
import json
import os
import re
import sys
import urllib.parse

try:
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import botocore.utils
except ImportError as e:
    if __name__ != "__main__":
        raise
    print("skipped: botocore is not importable by %s (Debian: python3-botocore): %s" % (
        sys.executable, e), file=sys.stderr)
    sys.exit(77)


def _signer(kind, creds, service, region, payload_hash):
    base = botocore.auth.S3SigV4Auth if kind == "s3" else botocore.auth.SigV4Auth

    class Signer(base):
        def payload(self, request):
            if payload_hash is not None:
                return payload_hash
            return super().payload(request)

    return Signer(creds, service, region)


def sign(req):
    """botocore's signature of req (a dict as above): a dict as above."""
    unknown = set(req) - {"method", "url", "params", "headers", "body", "payload_hash", "time",
                          "region", "service", "access_key", "secret_key", "session_token",
                          "signer", "name", "note"}
    if unknown:
        raise ValueError("unknown fields: %s" % ", ".join(sorted(unknown)))
    url = req["url"]
    if req.get("params"):
        q = botocore.utils.percent_encode_sequence([tuple(p) for p in req["params"]])
        url += ("&" if "?" in url else "?") + q
    headers = req.get("headers") or []
    if isinstance(headers, dict):
        headers = list(headers.items())
    body = req.get("body") or ""
    request = botocore.awsrequest.AWSRequest(method=req["method"], url=url,
                                             data=body.encode("utf-8") if body else None)
    for k, v in headers:
        request.headers[k] = v
    service = req.get("service", "s3")
    kind = req.get("signer") or ("s3" if service == "s3" else "generic")
    if kind not in ("s3", "generic"):
        raise ValueError("signer is \"s3\" or \"generic\", not %r" % kind)
    creds = botocore.credentials.Credentials(req["access_key"], req["secret_key"],
                                             req.get("session_token"))
    auth = _signer(kind, creds, service, req.get("region", "us-east-1"),
                   req.get("payload_hash"))
    # add_auth, with the given time
    request.context["timestamp"] = req["time"]
    auth._modify_request_before_signing(request)
    creq = auth.canonical_request(request)
    sts = auth.string_to_sign(request, creq)
    sig = auth.signature(sts, request)
    auth._inject_signature_to_request(request, sig)
    return {"canonical_request": creq, "string_to_sign": sts, "signature": sig,
            "authorization": request.headers["Authorization"], "url": request.url,
            "headers": [[k, v] for k, v in request.headers.items()]}


SUITE = {"time": "20150830T123600Z", "region": "us-east-1", "service": "service",
         "access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
         "signer": "generic"}


def suite_request(raw, token=None):
    """A request of AWS's SigV4 test suite (a .req file's text) as a request here."""
    head, _, body = raw.partition("\n\n")
    lines = head.split("\n")
    method, rest = lines[0].split(" ", 1)
    target = rest.rsplit(" ", 1)[0]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        if line[:1] in (" ", "\t") and headers:  # a folded value
            headers[-1][1] += "\n" + line
            continue
        k, _, v = line.partition(":")
        headers.append([k, v])
    host = next(v for k, v in headers if k.lower() == "host")
    path, _, query = target.partition("?")
    params = [list(p) for p in urllib.parse.parse_qsl(query, keep_blank_values=True)]
    return dict(SUITE, method=method, url="https://%s%s" % (host, path), params=params,
                headers=headers, body=body, session_token=token)


def check_suite(directory):
    """Signs every request of AWS's test suite under directory and compares with its
    .creq, .sts and .authz; returns the names that differ."""
    bad = []
    names = []
    for d, _, files in sorted(os.walk(directory)):
        for f in sorted(files):
            if f.endswith(".req"):
                names.append(os.path.join(d, f[:-4]))
    for base in names:
        name = os.path.relpath(base, directory)
        with open(base + ".req", encoding="utf-8") as f:
            raw = f.read()
        want = {}
        for ext, key in ((".creq", "canonical_request"), (".sts", "string_to_sign"),
                         (".authz", "authorization")):
            with open(base + ext, encoding="utf-8") as f:
                want[key] = f.read().replace("\r", "")
        # the session token is the one the canonical request shows (as botocore's
        # own tests take it)
        m = re.search(r"(?m)^x-amz-security-token:(.*)$", want["canonical_request"])
        got = sign(suite_request(raw, m.group(1) if m else None))
        diff = [k for k in want if got[k] != want[k]]
        if diff:
            bad.append((name, diff, got, want))
    return names, bad


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--text", action="store_true", help="three blocks of text, not JSON")
    ap.add_argument("--cases", help="a JSON list of {\"name\", \"request\", \"expected\"}")
    ap.add_argument("--check", action="store_true", help="with --cases: compare, print nothing")
    ap.add_argument("--aws-suite", metavar="DIR",
                    help="check the signer against AWS's test suite under DIR")
    args = ap.parse_args(argv)
    if args.aws_suite:
        names, bad = check_suite(args.aws_suite)
        for name, parts, got, want in bad:
            print("%s: %s differ\nbotocore:\n%s\nAWS:\n%s" % (
                name, ", ".join(parts), got["canonical_request"], want["canonical_request"]))
        print("%d of %d AWS test suite requests agree with botocore" % (
            len(names) - len(bad), len(names)))
        return 1 if bad or not names else 0
    if args.cases:
        with open(args.cases, encoding="utf-8") as f:
            cases = json.load(f)
        bad = 0
        for c in cases:
            got = sign(c["request"])
            if args.check and got != c.get("expected"):
                bad += 1
                print("%s: botocore gives\n%s\nnot\n%s" % (
                    c["name"], json.dumps(got, indent=1), json.dumps(c.get("expected"),
                                                                     indent=1)))
            c["expected"] = got
        if args.check:
            print("%d of %d cases differ" % (bad, len(cases)) if bad else
                  "%d cases agree with botocore" % len(cases))
            return 1 if bad else 0
        json.dump(cases, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
        return 0
    out = sign(json.load(sys.stdin))
    if args.text:
        print("== canonical request\n%s\n== string to sign\n%s\n== authorization\n%s" % (
            out["canonical_request"], out["string_to_sign"], out["authorization"]))
    else:
        json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
