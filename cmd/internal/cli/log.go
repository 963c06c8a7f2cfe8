package cli

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LogOptions are the agent's log flags, the same names, values and JSON lines as Flux's
// controllers (fluxcd/pkg/runtime/logger), without controller-runtime: the agent binary stays
// free of Kubernetes clients.
type LogOptions struct {
	Encoding string
	Level    string
}

func (o *LogOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Encoding, "log-encoding", "json", "Log encoding format. Can be 'json' or 'console'.")
	fs.StringVar(&o.Level, "log-level", "info", "Log verbosity level. Can be one of 'trace', 'debug', 'info', 'error'.")
}

// Logger returns a logr.Logger writing to stderr.
func (o LogOptions) Logger() (logr.Logger, error) {
	levels := map[string]zapcore.Level{"trace": zapcore.Level(-2), "debug": zapcore.DebugLevel, "info": zapcore.InfoLevel, "error": zapcore.ErrorLevel}
	level, ok := levels[o.Level]
	if !ok {
		return logr.Discard(), fmt.Errorf("--log-level %q: must be trace, debug, info or error", o.Level)
	}
	cfg := zapcore.EncoderConfig{
		TimeKey: "ts", LevelKey: "level", NameKey: "logger", MessageKey: "msg", StacktraceKey: "",
		LineEnding: zapcore.DefaultLineEnding, EncodeLevel: zapcore.LowercaseLevelEncoder,
		EncodeTime: zapcore.ISO8601TimeEncoder, EncodeDuration: zapcore.StringDurationEncoder,
	}
	var enc zapcore.Encoder
	switch o.Encoding {
	case "json":
		enc = zapcore.NewJSONEncoder(cfg)
	case "console":
		enc = zapcore.NewConsoleEncoder(cfg)
	default:
		return logr.Discard(), fmt.Errorf("--log-encoding %q: must be json or console", o.Encoding)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zap.NewAtomicLevelAt(level))
	return zapr.NewLogger(zap.New(core)), nil
}
