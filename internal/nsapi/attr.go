package nsapi

// Attributes the service interprets (sys.* on directories; kaon attr set
// sets them, root only for sys.*). New directories inherit sys.* and
// user.acl from their parent.
const (
	// AttrACL is a directory's ACL, EOS syntax: comma-separated
	// u:UID:rwx, g:GID:rx, z:r (everybody), with d (delete entries), u
	// (update: replace existing files), !d and !u (never). It adds to the
	// mode bits, and its denials take away from both.
	AttrACL = "sys.acl"
	// AttrUserACL is the owner's ACL of a directory, evaluated where
	// AttrEvalACL is set.
	AttrUserACL = "user.acl"
	AttrEvalACL = "sys.eval.useracl"

	AttrLayout    = "sys.forced.layout"    // layout of new files below (plain, replica:N, ec:K+M[:unit])
	AttrChecksums = "sys.forced.checksums" // comma list of checksums computed on write
	AttrMkPath    = "sys.mkpath"           // "off": uploads below do not create missing directories
	AttrSpace     = "sys.forced.space"     // space new files below are placed on (default "default")

	// Conversion policy: files below are converted to this layout or
	// space by the namespace service (existing ones too).
	AttrConvertLayout = "sys.convert.layout"
	AttrConvertSpace  = "sys.convert.space"

	// AttrRecycle makes deletes below recoverable (the recycle bin).
	AttrRecycle = "sys.recycle"
	// AttrVersioning on a directory: how many replaced contents of each
	// file below are kept (0 or absent: none).
	AttrVersioning = "sys.versioning"
)
