package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a cluster started with Options.TLS: the
// CA that signed everything, the members' server certificate (for
// 127.0.0.1) and a client certificate the members accept. Other is a
// client certificate signed by another CA, which they refuse.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	OtherCert, OtherKey                              string
}

// makeTLS writes a CA, a server and a client certificate, and a client
// certificate of another CA, into dir.
func makeTLS(t testing.TB, dir string) TLSFiles {
	t.Helper()
	ca, caKey := newCA(t, "etcdtest CA")
	other, otherKey := newCA(t, "etcdtest other CA")
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CA, "CERTIFICATE", ca.Raw)
	f.ServerCert, f.ServerKey = leaf(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	f.OtherCert, f.OtherKey = leaf(t, dir, "other", other, otherKey, x509.ExtKeyUsageClientAuth)
	return f
}

var serial atomic.Int64

func template(cn string) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func newCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := template(cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// leaf writes NAME.pem and NAME-key.pem, a certificate for 127.0.0.1
// signed by ca, whose common name is "etcdtest-NAME" (no etcd user has
// that name: with client certificate authentication, etcd takes a
// certificate's common name as the user of a request without a token).
func leaf(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (cert, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := template("etcdtest-" + name)
	tpl.KeyUsage = x509.KeyUsageDigitalSignature
	tpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	tpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	tpl.DNSNames = []string{"localhost"}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return cert, keyFile
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
