// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// setting is one configuration key. Its value comes from, in order: the
// flag, the environment (TRAINOPS_<KEY_IN_SNAKE_CASE>), the config file,
// the default.
type setting struct {
	key   string // camelCase with dots for nesting, as in the config file
	usage string
	def   any // string, bool, int, time.Duration or []string
}

// words splits a key into lower-case words: repo.auth.sshKeyFile ->
// repo auth ssh key file.
func words(key string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			out = append(out, strings.ToLower(b.String()))
			b.Reset()
		}
	}
	for _, r := range key {
		switch {
		case r == '.':
			flush()
		case r >= 'A' && r <= 'Z':
			flush()
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	flush()
	return out
}

// envName is the environment variable of a key: reconcileInterval ->
// TRAINOPS_RECONCILE_INTERVAL, repo.url -> TRAINOPS_REPO_URL.
func envName(key string) string {
	return "TRAINOPS_" + strings.ToUpper(strings.Join(words(key), "_"))
}

// flagName is the flag of a key: repo.auth.sshKeyFile ->
// --repo-auth-ssh-key-file.
func flagName(key string) string { return strings.Join(words(key), "-") }

// settings binds a command's flags, environment and config file through one
// viper instance; nothing outside this package reads viper.
type settings struct {
	v    *viper.Viper
	defs []setting
	file string
}

func newSettings(cmd *cobra.Command, defs []setting) *settings {
	s := &settings{v: viper.New(), defs: defs}
	cmd.Flags().StringVar(&s.file, "config", "", "configuration file (YAML) with any of the settings below, by their camelCase keys")
	for _, d := range defs {
		usage := fmt.Sprintf("%s (config key %q, env %s)", d.usage, d.key, envName(d.key))
		flag := flagName(d.key)
		switch v := d.def.(type) {
		case string:
			cmd.Flags().String(flag, v, usage)
		case bool:
			cmd.Flags().Bool(flag, v, usage)
		case int:
			cmd.Flags().Int(flag, v, usage)
		case time.Duration:
			cmd.Flags().Duration(flag, v, usage)
		case []string:
			cmd.Flags().StringSlice(flag, v, usage)
		default:
			panic(fmt.Sprintf("setting %s: unsupported default %T", d.key, d.def))
		}
		s.v.SetDefault(d.key, d.def)
		_ = s.v.BindPFlag(d.key, cmd.Flags().Lookup(flag))
		_ = s.v.BindEnv(d.key, envName(d.key))
	}
	return s
}

// load reads the config file, refusing keys it does not know.
func (s *settings) load() error {
	if s.file == "" {
		return nil
	}
	raw, err := os.ReadFile(s.file)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("config file %s: %w", s.file, err)
	}
	known := map[string]bool{}
	var names []string
	for _, d := range s.defs {
		known[d.key] = true
		names = append(names, d.key)
	}
	sort.Strings(names)
	for _, k := range flatten("", m) {
		if !known[k] {
			return fmt.Errorf("config file %s: unknown key %q (known keys: %s)", s.file, k, strings.Join(names, ", "))
		}
	}
	s.v.SetConfigFile(s.file)
	s.v.SetConfigType("yaml")
	if err := s.v.ReadInConfig(); err != nil {
		return fmt.Errorf("config file %s: %w", s.file, err)
	}
	return nil
}

// flatten lists the dotted keys of nested maps.
func flatten(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			out = append(out, flatten(key, sub)...)
			continue
		}
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}

func (s *settings) str(key string) string { return s.v.GetString(key) }

func (s *settings) strings(key string) []string {
	switch v := s.v.Get(key).(type) {
	case string:
		return strings.Split(v, ",")
	}
	return s.v.GetStringSlice(key)
}
func (s *settings) boolean(key string) (bool, error) {
	switch v := s.v.Get(key).(type) {
	case bool:
		return v, nil
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s: %q is not true or false", key, v)
		}
		return b, nil
	}
	return s.v.GetBool(key), nil
}

func (s *settings) integer(key string) (int, error) {
	raw := s.v.Get(key)
	switch v := raw.(type) {
	case int:
		return v, nil
	case string:
		var i int
		if _, err := fmt.Sscan(v, &i); err != nil {
			return 0, fmt.Errorf("%s: %q is not a whole number", key, v)
		}
		return i, nil
	}
	return s.v.GetInt(key), nil
}

func (s *settings) duration(key string) (time.Duration, error) {
	raw := s.v.Get(key)
	switch v := raw.(type) {
	case time.Duration:
		return v, nil
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a duration such as 30s or 10m", key, v)
		}
		return d, nil
	}
	return s.v.GetDuration(key), nil
}

// bytes reads a size written as Kubernetes quantities are: 512Mi, 1Gi.
func (s *settings) bytes(key string) (int64, error) {
	raw := s.str(key)
	q, err := resource.ParseQuantity(raw)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%s: %q is not a size such as 512Mi or 1Gi", key, raw)
	}
	return q.Value(), nil
}
