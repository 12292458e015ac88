package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// A sandbox's CA: the proxy signs, with it, a certificate for each host
// whose requests get a credential, and the sandbox trusts its certificate
// (CACertFile). Its key stays in the proxy's configuration directory,
// which no sandbox mounts.
const (
	CACertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// EnsureCA makes the CA in dir if it is not there yet, and returns its
// certificate (PEM). Both the wiring (before the sandbox starts, to give
// it the certificate) and the proxy (to sign) call it.
func EnsureCA(dir, sandbox string, now time.Time) ([]byte, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile)
	if cert, err := os.ReadFile(certPath); err == nil {
		if _, err := os.Stat(keyPath); err == nil {
			return cert, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "xmode egress CA for " + sandbox, Organization: []string{"xmode sandbox " + sandbox}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(400 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	return certPEM, nil
}

// loadCA reads the CA EnsureCA made, as a certificate that can sign.
func loadCA(dir string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	if c.Leaf == nil || !c.Leaf.IsCA {
		return nil, errors.New("sandbox CA: the certificate is not a CA")
	}
	return &c, nil
}

// writeFileAtomic writes a file whole or not at all: a reader (the proxy
// polling its directory) never sees half of it.
func writeFileAtomic(path string, b []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
