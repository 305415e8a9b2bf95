// AudioWorklet: the microphone at the context's rate (often 44.1 or 48 kHz) -> 24 kHz mono 16-bit PCM.
// Resampling here (not by a 24 kHz AudioContext) keeps Firefox and Safari working: they refuse to connect a
// microphone to a context of another rate. A box filter over the input span of each output sample, then linear
// interpolation; the state carries across blocks. Posts an ArrayBuffer of little-endian Int16 every ~100 ms.
const TARGET_RATE = 24000;
const CHUNK = 2400; // 100 ms at 24 kHz

class PcmResampler extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / TARGET_RATE; // input samples per output sample
    this.position = 0; // fractional input index of the next output sample, relative to `this.history`
    this.history = new Float32Array(0); // input samples not yet consumed
    this.out = new Int16Array(CHUNK);
    this.filled = 0;
    this.port.onmessage = (event) => { if (event.data === "flush") this.flush(); };
  }

  flush() {
    if (this.filled > 0) {
      this.port.postMessage(this.out.slice(0, this.filled).buffer);
      this.filled = 0;
    }
  }

  emit(value) {
    const clipped = Math.max(-1, Math.min(1, value));
    this.out[this.filled++] = clipped < 0 ? clipped * 0x8000 : clipped * 0x7fff;
    if (this.filled === CHUNK) {
      this.port.postMessage(this.out.buffer, [this.out.buffer]);
      this.out = new Int16Array(CHUNK);
      this.filled = 0;
    }
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const input = channels[0]; // mono: the first channel
    const data = new Float32Array(this.history.length + input.length);
    data.set(this.history);
    data.set(input, this.history.length);
    const half = Math.max(0, Math.floor(this.step / 2));
    while (this.position + 1 + half < data.length) {
      const index = Math.floor(this.position);
      const frac = this.position - index;
      let value = data[index] * (1 - frac) + data[index + 1] * frac;
      if (half > 0) { // averaging over the output sample's span: a cheap anti-aliasing low-pass
        let sum = 0;
        let count = 0;
        for (let i = Math.max(0, index - half); i <= index + half; i++) { sum += data[i]; count++; }
        value = 0.5 * value + 0.5 * (sum / count);
      }
      this.emit(value);
      this.position += this.step;
    }
    const keep = Math.max(0, Math.floor(this.position) - half);
    this.history = data.slice(keep);
    this.position -= keep;
    return true;
  }
}

registerProcessor("pcm-resampler", PcmResampler);
