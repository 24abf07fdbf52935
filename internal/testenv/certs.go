// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the certificate material of one local control plane: a CA, the API
// server's serving certificate, an admin client certificate, the service
// account signing key, and for the API server's aggregation layer a
// front-proxy CA with the client certificate the API server proxies with
// and the serving certificate of Kueue's visibility server (an aggregated
// API reached as its Service's name). Everything is written under dir.
type pki struct {
	CACert, ServingCert, ServingKey, AdminCert, AdminKey, SAKey, SAPub string
	FrontProxyCA, ProxyClientCert, ProxyClientKey                      string
	VisibilityCert, VisibilityKey                                      string
}

// proxyClientName is the name the API server's aggregation layer proxies
// as: the one its extension servers accept request headers from.
const proxyClientName = "front-proxy-client"

// newCA makes a self-signed CA named cn, written to certPath.
func newCA(cn, certPath string) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(certPath, "CERTIFICATE", der)
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		CACert:      filepath.Join(dir, "ca.crt"),
		ServingCert: filepath.Join(dir, "apiserver.crt"),
		ServingKey:  filepath.Join(dir, "apiserver.key"),
		AdminCert:   filepath.Join(dir, "admin.crt"),
		AdminKey:    filepath.Join(dir, "admin.key"),
		SAKey:       filepath.Join(dir, "sa.key"),
		SAPub:       filepath.Join(dir, "sa.pub"),

		FrontProxyCA:    filepath.Join(dir, "front-proxy-ca.crt"),
		ProxyClientCert: filepath.Join(dir, "front-proxy-client.crt"),
		ProxyClientKey:  filepath.Join(dir, "front-proxy-client.key"),
		VisibilityCert:  filepath.Join(dir, "visibility.crt"),
		VisibilityKey:   filepath.Join(dir, "visibility.key"),
	}
	caCert, caKey, err := newCA("trainops-local-ca", p.CACert)
	if err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1"), net.ParseIP(NodeIP)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(caCert, caKey, serving, p.ServingCert, p.ServingKey); err != nil {
		return nil, err
	}
	admin := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "trainops-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(caCert, caKey, admin, p.AdminCert, p.AdminKey); err != nil {
		return nil, err
	}
	if err := p.aggregation(caCert, caKey); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.SAKey, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.SAPub, "PUBLIC KEY", pub)
}

// aggregation writes the front-proxy CA and client certificate, and the
// visibility server's serving certificate, signed by the cluster's CA.
func (p *pki) aggregation(ca *x509.Certificate, caKey crypto.Signer) error {
	fpCA, fpKey, err := newCA("trainops-front-proxy-ca", p.FrontProxyCA)
	if err != nil {
		return err
	}
	client := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: proxyClientName},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(fpCA, fpKey, client, p.ProxyClientCert, p.ProxyClientKey); err != nil {
		return err
	}
	visibility := &x509.Certificate{
		SerialNumber: big.NewInt(4),
		Subject:      pkix.Name{CommonName: kueueVisibilityService + "." + kueueNamespace + ".svc"},
		DNSNames:     []string{kueueVisibilityService + "." + kueueNamespace + ".svc"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return issue(ca, caKey, visibility, p.VisibilityCert, p.VisibilityKey)
}

// issue signs tmpl with the CA and writes the certificate and a new key.
func issue(ca *x509.Certificate, caKey crypto.Signer, tmpl *x509.Certificate, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(10 * 365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
