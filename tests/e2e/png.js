// Real PNG files for image tests: RGB, 8 bits, one IDAT, correct CRCs, so a decoder reads them.
import { deflateSync } from 'node:zlib';

function be32(v) {
  return Buffer.from([(v >>> 24) & 255, (v >>> 16) & 255, (v >>> 8) & 255, v & 255]);
}
const CRC = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC[(c ^ b) & 255] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const body = Buffer.concat([Buffer.from(type), data]);
  return Buffer.concat([be32(data.length), body, be32(crc32(body))]);
}

// A picture of width x height drawn from `seed`, compressed at `level` (the same pixels at
// another level are another file).
export function png(width, height, seed, level = 6) {
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width; x++) {
      const v = Math.imul((x >> 3) + 7 * (y >> 3) + 1, 2654435761) ^ Math.imul(seed, 40503);
      for (let c = 0; c < 3; c++) row[1 + x * 3 + c] = (v >>> (8 * c)) & 255;
    }
    rows.push(row);
  }
  const ihdr = Buffer.concat([be32(width), be32(height), Buffer.from([8, 2, 0, 0, 0])]);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr), chunk('IDAT', deflateSync(Buffer.concat(rows), { level })),
    chunk('IEND', Buffer.alloc(0))]);
}

export const pngDataUrl = (bytes) => `data:image/png;base64,${bytes.toString('base64')}`;
