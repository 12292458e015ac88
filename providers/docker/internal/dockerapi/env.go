package dockerapi

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// ConfigFromEnv is the configuration the docker CLI's environment gives,
// read as the SDK's client.FromEnv reads it:
//
//   - DOCKER_HOST: the endpoint (empty: DefaultHost);
//   - DOCKER_API_VERSION: pins the API version (no negotiation);
//   - DOCKER_CERT_PATH: TLS with ca.pem, cert.pem and key.pem from that
//     directory; the daemon's certificate is verified only when
//     DOCKER_TLS_VERIFY is set (to anything), as with the SDK.
//
// getenv is os.Getenv outside tests.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := Config{Host: getenv("DOCKER_HOST"), Version: getenv("DOCKER_API_VERSION")}
	if dir := getenv("DOCKER_CERT_PATH"); dir != "" {
		t, err := tlsFromDir(dir, getenv("DOCKER_TLS_VERIFY") != "")
		if err != nil {
			return cfg, err
		}
		cfg.TLS = t
	}
	return cfg, nil
}

// tlsFromDir builds the client TLS configuration from DOCKER_CERT_PATH.
// Like the SDK, a missing client certificate pair is allowed (server-only
// TLS), a missing CA file is not when verifying.
func tlsFromDir(dir string, verify bool) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !verify} //nolint:gosec // DOCKER_TLS_VERIFY unset means "do not verify", as for the docker CLI
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	switch {
	case err == nil:
		pool, perr := x509.SystemCertPool()
		if perr != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("DOCKER_CERT_PATH: no certificate in %s", filepath.Join(dir, "ca.pem"))
		}
		t.RootCAs = pool
	case verify:
		return nil, fmt.Errorf("DOCKER_CERT_PATH with DOCKER_TLS_VERIFY: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil || kerr == nil {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("DOCKER_CERT_PATH: load the client certificate: %w", err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	return t, nil
}
