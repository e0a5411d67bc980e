// Package remote is a loop.Model backend for models served elsewhere behind
// an OpenAI-compatible chat-completions API with tools (vLLM, llama-server,
// ollama, hosted APIs).
//
// One Complete is one POST to {BaseURL}/chat/completions (non-streaming).
// Tools are sent as functions; Request.RequireTool becomes a forced
// tool_choice. 429 and 5xx answers, connection errors and per-attempt
// timeouts are retried with exponential backoff and jitter inside the
// caller's ctx; when the retries run out the error wraps loop.ErrOverloaded,
// so the loop backs off and calls again. Other 4xx answers are plain errors
// (*StatusError). Tool-call arguments that are not a JSON object are a
// *loop.InvalidResponseError (kind malformed_call); so is an answer with
// neither text nor calls (kind empty). FunctionGemma call blocks that come
// back as text (<start_function_call>call:NAME{...}<end_function_call> in
// the content, from a server without a tool-aware chat template) are parsed
// into calls with functiongemma.ParseCalls.
package remote

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentfleet/fleet/fleettype"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/loop"
)

// Defaults for Config's zero values.
const (
	DefaultTimeout      = 120 * time.Second
	DefaultMaxRetries   = 3
	DefaultRetryBackoff = 500 * time.Millisecond
	DefaultMaxBackoff   = 10 * time.Second
	// maxBody caps the response body read.
	maxBody = 16 << 20
	// rawCap caps raw text kept in errors.
	rawCap = 2048
)

// ErrInvalidConfig is wrapped by New's validation errors.
var ErrInvalidConfig = errors.New("remote: invalid config")

// ErrProtocol is wrapped by errors for answers that do not follow the
// chat-completions schema (a body that is not JSON, no choices).
var ErrProtocol = errors.New("remote: response does not follow the chat-completions schema")

// Config configures a remote Model. The zero value of each optional field
// means its default.
type Config struct {
	// BaseURL is the API root that /chat/completions is appended to, for
	// example "http://localhost:8080/v1" (llama-server, vLLM) or
	// "http://localhost:11434/v1" (ollama). Required; http or https.
	BaseURL string
	// APIKey, when set, is sent as "Authorization: Bearer <APIKey>".
	APIKey string
	// Model is the model name sent with every request. Required.
	Model string
	// Timeout bounds one HTTP attempt (0 = DefaultTimeout). A timed-out
	// attempt is retried. The caller's ctx bounds the whole call.
	Timeout time.Duration
	// MaxRetries is how many times a retryable failure is retried
	// (0 = DefaultMaxRetries, -1 = never).
	MaxRetries int
	// RetryBackoff is the first retry's backoff, doubled on each further
	// retry up to MaxBackoff, with full jitter; a Retry-After header (in
	// seconds) is honoured up to MaxBackoff. 0 = DefaultRetryBackoff.
	RetryBackoff time.Duration
	// MaxBackoff caps one backoff (0 = DefaultMaxBackoff).
	MaxBackoff time.Duration
	// MaxTokens, when positive, is sent as max_tokens.
	MaxTokens int
	// Temperature, when set, is sent as temperature (0 = greedy).
	Temperature *float64
	// Headers are added to every request.
	Headers map[string]string
	// HTTPClient is the client to use (nil = a new http.Client; its own
	// Timeout should be 0, since Timeout above bounds each attempt).
	HTTPClient *http.Client
}

func (c *Config) validate() error {
	if c.BaseURL == "" {
		return fmt.Errorf("%w: BaseURL is required", ErrInvalidConfig)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: BaseURL %q is not an http(s) URL", ErrInvalidConfig, c.BaseURL)
	}
	if c.Model == "" {
		return fmt.Errorf("%w: Model is required", ErrInvalidConfig)
	}
	if c.Timeout < 0 || c.RetryBackoff < 0 || c.MaxBackoff < 0 {
		return fmt.Errorf("%w: Timeout, RetryBackoff and MaxBackoff must not be negative", ErrInvalidConfig)
	}
	if c.MaxRetries < -1 {
		return fmt.Errorf("%w: MaxRetries must be >= -1, got %d", ErrInvalidConfig, c.MaxRetries)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("%w: MaxTokens must not be negative", ErrInvalidConfig)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return fmt.Errorf("%w: Temperature must be within [0, 2]", ErrInvalidConfig)
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, DefaultMaxBackoff)
	switch c.MaxRetries {
	case 0:
		c.MaxRetries = DefaultMaxRetries
	case -1:
		c.MaxRetries = 0
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	return nil
}

// Model is a remote chat-completions model. It is safe for concurrent use.
type Model struct {
	cfg     Config
	noUsage sync.Once
}

var _ loop.Model = (*Model)(nil)

// New validates cfg and returns a Model.
func New(cfg Config) (*Model, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Model{cfg: cfg}, nil
}

// StatusError is a non-retryable HTTP error answer (a 4xx other than 429),
// or the last retryable one inside an overload error.
type StatusError struct {
	StatusCode int
	// Body is the start of the response body.
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("remote: HTTP %d: %s", e.StatusCode, e.Body)
}

// retryable is an attempt's failure that may be retried.
type retryable struct {
	err   error
	after time.Duration // Retry-After, or 0
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// Complete sends req and maps the answer. See the package comment for the
// error contract.
func (m *Model) Complete(ctx context.Context, req *loop.Request) (*loop.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	body, err := m.encode(req)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	var last error
	for attempt := 0; ; attempt++ {
		raw, err := m.attempt(ctx, body)
		if err == nil {
			resp, err := decodeResponse(raw)
			var u *fleettype.Usage
			var bad *loop.InvalidResponseError
			switch {
			case resp != nil:
				u = &resp.Usage
			case errors.As(err, &bad):
				u = &bad.Usage
			}
			if u != nil {
				if u.CompletionDuration == 0 && u.PromptDuration == 0 {
					// No server timings: count the wall time as generation.
					u.CompletionDuration = time.Since(t0)
				}
				if u.PromptTokens == 0 && u.CompletionTokens == 0 {
					m.noUsage.Do(func() {
						slog.Warn("remote: the server reported no token usage for an answer; the job's token counts leave it out "+
							"(ollama omits usage when it aborts a generation that repeats one token)", "model", m.cfg.Model)
					})
				}
			}
			return resp, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("remote: %w", ctx.Err())
		}
		var r *retryable
		if !errors.As(err, &r) {
			return nil, err
		}
		last = r.err
		if attempt >= m.cfg.MaxRetries {
			return nil, fmt.Errorf("remote: %w after %d attempts: %w", loop.ErrOverloaded, attempt+1, last)
		}
		wait := m.backoff(attempt, r.after)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			// No time left for another attempt: let the loop back off.
			return nil, fmt.Errorf("remote: %w (deadline too close to retry) after %d attempts: %w", loop.ErrOverloaded, attempt+1, last)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("remote: %w", ctx.Err())
		case <-timer.C:
		}
	}
}

// backoff returns the wait before retry number attempt+1.
func (m *Model) backoff(attempt int, after time.Duration) time.Duration {
	if after > 0 {
		return min(after, m.cfg.MaxBackoff)
	}
	d := m.cfg.RetryBackoff << min(attempt, 20)
	d = min(d, m.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// attempt makes one HTTP request and returns the body of a 200 answer.
func (m *Model) attempt(ctx context.Context, body []byte) ([]byte, error) {
	actx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, m.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if m.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+m.cfg.APIKey)
	}
	for k, v := range m.cfg.Headers {
		hreq.Header.Set(k, v)
	}
	hresp, err := m.cfg.HTTPClient.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Connection errors and the attempt's own timeout.
		return nil, &retryable{err: fmt.Errorf("remote: %w", err)}
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxBody))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &retryable{err: fmt.Errorf("remote: reading the answer: %w", err)}
	}
	if hresp.StatusCode == http.StatusOK {
		return raw, nil
	}
	se := &StatusError{StatusCode: hresp.StatusCode, Body: textcut.Clip(strings.TrimSpace(string(raw)), 512, "...")}
	if hresp.StatusCode == http.StatusTooManyRequests || hresp.StatusCode >= 500 {
		return nil, &retryable{err: se, after: retryAfter(hresp.Header.Get("Retry-After"))}
	}
	return nil, se
}

func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// ---- wire format ----
