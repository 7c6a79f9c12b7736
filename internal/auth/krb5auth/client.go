package krb5auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
)

// ClientFromEnv is a Kerberos client holding this user's tickets, found
// as MIT's tools find them: the credential cache $KRB5CCNAME (a file:
// "FILE:path" or a path), else /tmp/krb5cc_$UID, with the configuration
// $KRB5_CONFIG, else /etc/krb5.conf. ok is false when there is no cache
// (no kinit); an error says why a cache that is there cannot be used.
func ClientFromEnv() (cl *client.Client, ok bool, err error) {
	cc := os.Getenv("KRB5CCNAME")
	switch {
	case cc == "":
		cc = filepath.Join(os.TempDir(), "krb5cc_"+strconv.Itoa(os.Getuid()))
	case strings.HasPrefix(cc, "FILE:"):
		cc = strings.TrimPrefix(cc, "FILE:")
	case strings.Contains(cc, ":") && !strings.HasPrefix(cc, "/"):
		return nil, false, fmt.Errorf("the Kerberos credential cache %s: only FILE: caches are read", cc)
	}
	if _, err := os.Stat(cc); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	conf := os.Getenv("KRB5_CONFIG")
	if conf == "" {
		conf = "/etc/krb5.conf"
	}
	cfg, err := config.Load(conf)
	if err != nil {
		return nil, false, fmt.Errorf("the Kerberos configuration %s: %w", conf, err)
	}
	ccache, err := credentials.LoadCCache(cc)
	if err != nil {
		return nil, false, fmt.Errorf("the Kerberos credential cache %s: %w", cc, err)
	}
	cl, err = client.NewFromCCache(ccache, cfg, client.DisablePAFXFAST(true))
	if err != nil {
		return nil, false, fmt.Errorf("the Kerberos credential cache %s: %w (kinit again)", cc, err)
	}
	return cl, true, nil
}
