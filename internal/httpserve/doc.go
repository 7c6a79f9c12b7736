// Package httpserve is what Kaon's two HTTP front ends share: httpfront
// at a namespace server and datafront at a storage server. A request
// walks through one of them, never both: the namespace endpoint answers
// an upload or a read with a redirect to the data endpoint (DataPath),
// and the client's second request starts at the storage server. Both log
// each request once (AccessLog), close connections lingering
// (LingerListener), and answer a few things alike: a ranged PUT's range is
// read alike (PutRange), Want-Digest is answered from the stored checksums
// (SetDigest), and a third-party copy refused before it started says so
// in a "failure:" line (CopyRefused, CheckCredential).
package httpserve
