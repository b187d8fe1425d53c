// Files in from the page: the "Add files" button with its file picker, and dropping files anywhere on the page (Shift held: text files are saved as files).

/**
 * @param {object} o
 * @param {HTMLButtonElement} o.button opens the picker
 * @param {HTMLInputElement} o.input the hidden <input type=file>
 * @param {HTMLElement} o.overlay shown while files are dragged over the page
 * @param {(files: FileList, o: {asFile: boolean}) => void} o.add takes the chosen or dropped files (the uploader);
 *   `asFile` when Shift was held (on the drop, or on the click that opened the picker)
 */
export function acceptFiles({ button, input, overlay, add }) {
  let asFile = false;
  button.addEventListener('click', (e) => {
    asFile = e.shiftKey;
    input.click();
  });
  input.addEventListener('change', (e) => {
    add(e.target.files, { asFile });
    e.target.value = '';
  });

  const hasFiles = (e) => Boolean(e.dataTransfer) && [...e.dataTransfer.types].includes('Files');
  // dragenter and dragleave come for every element crossed: the overlay goes when the count is back to 0.
  let depth = 0;
  addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth++;
    overlay.hidden = false;
  });
  addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  addEventListener('dragleave', (e) => {
    if (!hasFiles(e)) return;
    depth = Math.max(0, depth - 1);
    if (depth === 0) overlay.hidden = true;
  });
  addEventListener('drop', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth = 0;
    overlay.hidden = true;
    add(e.dataTransfer.files, { asFile: e.shiftKey });
  });
}
