"""PCM .wav files turned into what a program's `audio_encoder` takes: the
samples themselves ([1, channels, samples], for an encoder of the waveform)
or Whisper-style log-mel features in chunks ([chunks, n_mels, frames], for
Whisper and Voxtral), computed with the feature extractor's parameters the
program records (mel_features.py).

Stereo is mixed down to mono by averaging the channels, as Voxtral's
processor does (transformers' `load_audio_as(..., force_mono=True)`); the
sampling rate must already be the extractor's: processors refuse another
rate rather than resample, and so does this module.
Runtime side: the standard library's `wave` and numpy only."""
from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .mel_features import MelFeatureSpec, chunks_needed, log_mel_features


class AudioFileError(ValueError):
    """A .wav that cannot become the encoder's input; the message names the
    file, the numbers and the remedy."""


@dataclass(frozen=True)
class AudioInput:
    array: np.ndarray        # the encoder's input, float32
    notes: tuple[str, ...]   # what was done to the file (channels mixed)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """float32 samples [channels, frames] scaled to [-1, 1], and the rate."""
    try:
        with wave.open(str(path)) as w:
            channels, width, frames = w.getnchannels(), w.getsampwidth(), w.getnframes()
            rate = w.getframerate()
            raw = w.readframes(frames)
    except (wave.Error, EOFError) as e:
        raise AudioFileError(f"audio {path} is not a PCM .wav file: {e}") from None
    if width not in (1, 2, 4):
        raise AudioFileError(f"audio {path} has {8 * width}-bit samples: give 8-, 16- or "
                             "32-bit PCM")
    if width == 1:  # 8-bit PCM is unsigned
        samples = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    else:
        dtype = np.int16 if width == 2 else np.int32
        samples = np.frombuffer(raw, dtype).astype(np.float32) / float(2 ** (8 * width - 1))
    frames = samples.size // channels  # a truncated last frame is dropped
    return samples[:frames * channels].reshape(frames, channels).T.copy(), rate


def wav_features(path: Path, spec: MelFeatureSpec, max_chunks: int) -> AudioInput:
    """The .wav's log-mel features [chunks, n_mels, frames], at most
    `max_chunks` chunks (what the program's audio_encoder takes)."""
    samples, rate = read_wav(path)
    channels, count = samples.shape
    if rate != spec.sampling_rate:
        raise AudioFileError(
            f"audio {path} is sampled at {rate} Hz; the program's feature extractor takes "
            f"{spec.sampling_rate} Hz (processors do not resample): resample it, e.g. "
            f"sox {path.name} -r {spec.sampling_rate} out.wav")
    if count == 0:
        raise AudioFileError(f"audio {path} holds no samples: record or pick another file")
    if count < spec.n_fft:
        raise AudioFileError(
            f"audio {path} is {count} samples ({1000 * count / rate:.1f} ms at {rate} Hz), "
            f"shorter than one analysis window of the feature extractor, n_fft={spec.n_fft} "
            f"samples ({1000 * spec.n_fft / rate:.1f} ms): give at least that much audio")
    chunks = chunks_needed(count, spec)
    if chunks > max_chunks:
        most = max_chunks * spec.chunk_seconds
        raise AudioFileError(
            f"audio {path} is {count / rate:.2f} s ({count} samples at {rate} Hz), "
            f"{chunks} chunks of {spec.chunk_seconds:g} s; the program's audio_encoder takes "
            f"at most {max_chunks} chunk(s) ({most:g} s). Cut it into pieces of at most "
            f"{most:g} s (e.g. sox {path.name} part.wav trim 0 {most:g} : newfile : restart) "
            "and ask about each, or export with a larger max_audio_chunks (and max_seq_len)")
    notes = []
    if channels > 1:
        notes.append(f"{path.name}: {channels} channels mixed down to mono (their mean), "
                     "as the model's processor does")
        samples = samples.mean(axis=0, keepdims=True)
    return AudioInput(log_mel_features(samples[0], spec), tuple(notes))


__all__ = ["AudioFileError", "AudioInput", "read_wav", "wav_features"]
