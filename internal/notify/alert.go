// SPDX-License-Identifier: Apache-2.0

package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Alert providers: where a sync's news goes for people to read.
const (
	// Slack is an incoming webhook taking Slack's message payload (Slack,
	// and the chat servers that accept it: Mattermost, Rocket.Chat,
	// Discord's /slack endpoint).
	Slack = "slack"
	// Generic is any webhook: the alert as JSON, signed when a key is set.
	Generic = "generic"
)

// AlertProviders are the alert providers trainops sends to.
var AlertProviders = []string{Slack, Generic}

// SignatureHeader carries a generic webhook body's HMAC-SHA256 under the
// channel's key: "sha256=" and the hex digest.
const SignatureHeader = "X-Trainops-Signature"

// Alerts to one channel come in bursts of at most alertBurst, then one
// every alertEvery: a shared base that breaks fifty GitSyncs at once does
// not flood a channel (chat webhooks also limit their callers). Alerts
// held back wait, the latest of each source replacing its earlier one.
const (
	alertEvery = 10 * time.Second
	alertBurst = 5
	// maxAlertText bounds an alert's message.
	maxAlertText = 2000
)

var metricAlerts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "trainops_alerts_total",
	Help: "Alerts sent to chat and webhook channels, by provider and result (posted, retried, limited, dropped).",
}, []string{"provider", "result"})

func init() { metrics.Registry.MustRegister(metricAlerts) }

// Channel is where alerts go.
type Channel struct {
	Provider string
	// Address is the webhook's URL. It is a secret (a Slack webhook's
	// holds its token): it appears in no error, log line or metric.
	Address string
	// Key, when set, signs a generic webhook's body (SignatureHeader).
	Key string
}

// ChannelFor checks a channel's provider and address; its errors never
// quote the address.
func ChannelFor(provider, address, key string) (Channel, error) {
	c := Channel{Provider: provider, Address: strings.TrimSpace(address), Key: key}
	switch provider {
	case Slack, Generic:
	default:
		return c, fmt.Errorf("provider %q is not one of %s", provider, strings.Join(AlertProviders, ", "))
	}
	if c.Address == "" {
		return c, fmt.Errorf("no key address holds the webhook's URL")
	}
	u, err := url.Parse(c.Address)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return c, fmt.Errorf("the address is not an http(s) URL without credentials")
	}
	if key != "" && provider != Generic {
		return c, fmt.Errorf("a key signs generic webhooks only")
	}
	return c, nil
}

// ChannelFromSecret is ChannelFor with a Secret's keys address and key.
func ChannelFromSecret(provider string, data map[string][]byte) (Channel, error) {
	return ChannelFor(provider, string(data["address"]), string(data["key"]))
}

// Alert is what became of one sync, for people.
type Alert struct {
	// Source names what synced: "GitSync team-a/training".
	Source   string `json:"source"`
	Revision string `json:"revision"`
	// Commit is the revision's SHA, when it names one.
	Commit string `json:"commit,omitempty"`
	State  State  `json:"state"`
	// Reason is Applied, DriftRepaired, or why the revision was refused.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Alert queues a for channel c and returns at once.
func (n *Notifier) Alert(c Channel, a Alert) {
	if r := []rune(a.Message); len(r) > maxAlertText {
		a.Message = string(r[:maxAlertText-1]) + "…"
	}
	n.queue(alertMessage{channel: c, alert: a})
}

// alertMessage is an alert for a channel.
type alertMessage struct {
	channel Channel
	alert   Alert
}

func (m alertMessage) key() string {
	return m.channel.Provider + " " + m.channel.Address + " " + m.alert.Source
}
func (m alertMessage) destination() string            { return m.channel.Address }
func (m alertMessage) limit() (time.Duration, int)    { return alertEvery, alertBurst }
func (m alertMessage) provider() string               { return m.channel.Provider }
func (m alertMessage) metric() *prometheus.CounterVec { return metricAlerts }
func (m alertMessage) secrets() []string {
	out := []string{m.channel.Address, m.channel.Key}
	if u, err := url.Parse(m.channel.Address); err == nil && len(u.RequestURI()) > 1 {
		out = append(out, u.RequestURI())
	}
	return out
}
func (m alertMessage) logValues() []any {
	return []any{"provider", m.channel.Provider, "source", m.alert.Source, "revision", m.alert.Revision}
}

func (m alertMessage) request(ctx context.Context) (*http.Request, error) {
	var body []byte
	var err error
	switch m.channel.Provider {
	case Slack:
		body, err = json.Marshal(slackPayload(m.alert))
	case Generic:
		body, err = json.Marshal(m.alert)
	default:
		return nil, fmt.Errorf("provider %q is not one of %s", m.channel.Provider, strings.Join(AlertProviders, ", "))
	}
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.channel.Address, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the channel's address is not a URL")
	}
	req.Header.Set("Content-Type", "application/json")
	if m.channel.Key != "" {
		mac := hmac.New(sha256.New, []byte(m.channel.Key))
		mac.Write(body)
		req.Header.Set(SignatureHeader, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	return req, nil
}

// slackMessage is Slack's incoming-webhook payload: a text, and an
// attachment whose colour says the outcome.
type slackMessage struct {
	Username    string            `json:"username"`
	Text        string            `json:"text"`
	Attachments []slackAttachment `json:"attachments"`
}

type slackAttachment struct {
	Color    string `json:"color"`
	Title    string `json:"title"`
	Text     string `json:"text"`
	Fallback string `json:"fallback"`
}

// slackPayload is a's Slack message. Everything taken from a repository
// (file names, messages) is escaped as Slack asks, so that a name such as
// <!channel> is shown, not acted on.
func slackPayload(a Alert) slackMessage {
	color := "good"
	if a.State == Failure {
		color = "danger"
	}
	title := fmt.Sprintf("%s: %s %s", a.Source, a.Reason, ShortRevision(a.Revision))
	return slackMessage{
		Username: "trainops",
		Text:     slackEscape(title),
		Attachments: []slackAttachment{{
			Color: color, Title: slackEscape(title), Text: slackEscape(a.Message), Fallback: slackEscape(title + ": " + a.Message),
		}},
	}
}

// slackEscape escapes the three characters Slack reads as markup.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// ShortRevision shortens "main@sha1:<sha>" to "main@<7 hex>".
func ShortRevision(revision string) string {
	ref, sha, ok := strings.Cut(revision, "@sha1:")
	if !ok || len(sha) < 7 {
		return revision
	}
	return ref + "@" + sha[:7]
}
