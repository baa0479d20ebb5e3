// A corral RPC client in Go (standard library only).
//
//	go run examples/rpc/client.go [--script SCRIPT.jsonl] [PROMPT ...]
//
// Spawns `corral rpc` (the scripted provider with SCRIPT, the offline model without),
// says hello (with $CORRAL_RPC_TOKEN when set), sends one prompt, prints the events
// until `done`, asks for the state, then closes stdin and waits for the exit.
// $CORRAL overrides the command that starts corral (default: corral; split on
// whitespace, no quoting).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Frame is one line corral writes: a response or an event. Only the fields this
// client reads are named; the whole line stays in Raw.
type Frame struct {
	Type    string          `json:"type"`
	ID      json.RawMessage `json:"id"`
	Success bool            `json:"success"`
	Error   string          `json:"error"`
	Data    json.RawMessage `json:"data"`
	Delta   string          `json:"delta"`
	Name    string          `json:"name"`
	Args    json.RawMessage `json:"args"`
	IsError bool            `json:"is_error"`
	Stop    string          `json:"stop"`
	Content []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	} `json:"content"`
	Raw []byte `json:"-"`
}

// Rpc is one `corral rpc` process: write commands, read frames.
type Rpc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	ids   int
}

func start(argv []string) (*Rpc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr // corral's warnings and logs show up in the terminal
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// A line may be as long as corral's own limit (16 MiB): ReadBytes has no cap.
	return &Rpc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<16)}, nil
}

// Send writes one command; it returns its id.
func (r *Rpc) Send(kind string, fields map[string]any) (int, error) {
	r.ids++
	command := map[string]any{"id": r.ids, "type": kind}
	for k, v := range fields {
		command[k] = v
	}
	line, err := json.Marshal(command)
	if err != nil {
		return 0, err
	}
	_, err = r.stdin.Write(append(line, '\n'))
	return r.ids, err
}

// Next reads the next frame; io.EOF once corral closed its stdout.
func (r *Rpc) Next() (*Frame, error) {
	line, err := r.out.ReadBytes('\n')
	if len(line) == 0 && err != nil {
		return nil, err
	}
	frame := &Frame{Raw: line}
	if err := json.Unmarshal(line, frame); err != nil {
		return nil, fmt.Errorf("not a JSON frame: %w", err)
	}
	return frame, nil
}

// Call sends a command and returns its response's data (events in between are shown).
func (r *Rpc) Call(kind string, fields map[string]any) (json.RawMessage, error) {
	id, err := r.Send(kind, fields)
	if err != nil {
		return nil, err
	}
	want := fmt.Sprint(id)
	for {
		frame, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("corral exited before answering %s", kind)
		} else if err != nil {
			return nil, err
		}
		if frame.Type == "response" && string(frame.ID) == want {
			if !frame.Success {
				return nil, fmt.Errorf("%s failed: %s", kind, frame.Error)
			}
			return frame.Data, nil
		}
		show(frame)
	}
}

// Close closes stdin (corral finishes queued work, then exits) and returns the exit status.
func (r *Rpc) Close() int {
	r.stdin.Close()
	for {
		frame, err := r.Next()
		if err != nil {
			break
		}
		show(frame)
	}
	if err := r.cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		return 1
	}
	return 0
}

// show prints one frame for people.
func show(f *Frame) {
	switch f.Type {
	case "text_delta":
		fmt.Print(f.Delta)
	case "assistant_start":
		fmt.Print("assistant: ")
	case "assistant_message":
		fmt.Println()
	case "tool_call":
		fmt.Printf("  -> %s %s\n", f.Name, f.Args)
	case "tool_result":
		parts := make([]string, 0, len(f.Content))
		for _, block := range f.Content {
			if block.Text != nil {
				parts = append(parts, *block.Text)
			} else {
				parts = append(parts, "<"+block.Type+">")
			}
		}
		text := []rune(strings.Join(parts, " "))
		if len(text) > 200 {
			text = text[:200]
		}
		mark := "ok"
		if f.IsError {
			mark = "error"
		}
		fmt.Printf("  <- %s: %q\n", mark, string(text))
	case "turn_end":
		extra := ""
		if f.Error != "" {
			extra = " (" + f.Error + ")"
		}
		fmt.Printf("[turn_end %s%s]\n", f.Stop, extra)
	case "turn_start", "user_message":
	default:
		var rest map[string]json.RawMessage
		_ = json.Unmarshal(f.Raw, &rest)
		delete(rest, "type")
		if len(rest) == 0 {
			fmt.Printf("[%s]\n", f.Type)
		} else {
			line, _ := json.Marshal(rest)
			fmt.Printf("[%s] %s\n", f.Type, line)
		}
	}
}

func run() (int, error) {
	var script string
	var words []string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		if args[i] == "--script" && i+1 < len(args) {
			i++
			script = args[i]
		} else {
			words = append(words, args[i])
		}
	}
	prompt := strings.Join(words, " ")
	if prompt == "" {
		prompt = "Summarise the README."
	}
	command := os.Getenv("CORRAL")
	if strings.TrimSpace(command) == "" {
		command = "corral"
	}
	argv := append(strings.Fields(command), "rpc")
	if script != "" {
		argv = append(argv, "--provider", "scripted", "--script", script)
	}
	rpc, err := start(argv)
	if err != nil {
		return 1, err
	}
	hello := map[string]any{}
	if token := os.Getenv("CORRAL_RPC_TOKEN"); token != "" {
		hello["token"] = token
	}
	data, err := rpc.Call("hello", hello)
	if err != nil {
		return 1, err
	}
	var info struct{ Version, Provider, Model string }
	if err := json.Unmarshal(data, &info); err != nil {
		return 1, err
	}
	fmt.Printf("connected: corral %s, %s/%s\n", info.Version, info.Provider, info.Model)
	if _, err := rpc.Call("prompt", map[string]any{"message": prompt}); err != nil {
		return 1, err
	}
	for {
		frame, err := rpc.Next()
		if err != nil {
			return 1, fmt.Errorf("corral stopped before done: %w", err)
		}
		show(frame)
		if frame.Type == "done" {
			break
		}
	}
	if data, err = rpc.Call("get_state", nil); err != nil {
		return 1, err
	}
	var state struct {
		MessageCount int `json:"message_count"`
		Usage        struct {
			Output int `json:"output"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &state); err != nil {
		return 1, err
	}
	fmt.Printf("messages: %d, tokens out: %d\n", state.MessageCount, state.Usage.Output)
	status := rpc.Close()
	fmt.Printf("corral exited with %d\n", status)
	return status, nil
}

func main() {
	status, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(status)
}
